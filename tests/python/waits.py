"""Workload of python_frames_wall: three threads that wait, each in its own
function, while the main thread works.
  sleeper   waits_in_sleep(): time.sleep
  locker    waits_on_lock(): a lock the main thread holds until the end
  reader    waits_in_recv(): a socket recv that nothing answers
  main      works_in_main(): CPU, then releases everything
usage: waits.py SECONDS"""
import socket
import sys
import threading
import time

held = threading.Lock()
held.acquire()
stop = threading.Event()


def waits_in_sleep():
    while not stop.is_set():
        time.sleep(0.05)


def waits_on_lock():
    held.acquire()
    held.release()


def waits_in_recv(sock):
    try:
        sock.recv(1)
    except OSError:
        pass


def works_in_main(seconds):
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += sum(range(1000))
    return n


def main():
    seconds = float(sys.argv[1])
    a, b = socket.socketpair()
    threads = [threading.Thread(target=waits_in_sleep, name="sleeper"),
               threading.Thread(target=waits_on_lock, name="locker"),
               threading.Thread(target=waits_in_recv, args=(a,), name="reader")]
    for t in threads:
        t.start()
    works_in_main(seconds)
    stop.set()
    held.release()
    b.send(b"x")
    for t in threads:
        t.join()
    print("waits done")


main()
