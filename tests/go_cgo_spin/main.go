// A cgo program for `snapprof record` (tests/test_preload_record.c): four
// goroutines spin in main.spinHot on two Ps while the main goroutine keeps
// forcing garbage collections and sleeping, so the runtime preempts the
// spinners with SIGURG (the sampling signal too) many times a second. The
// spinners' loop has no call in it, so only those signals can stop them:
// if they did not reach Go's handler, the program would hang. It stops
// after a fixed amount of work, so its CPU time does not depend on the
// machine, and prints a line that does not either. Usage: go_cgo_spin
// [ROUNDS [return]].
package main

/*
#include <stdlib.h>
static int cgo_add(int a, int b) { return a + b; }
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

const spinners = 4

var stop int32

// progress[i*8]: spinner i's rounds of 1<<16 iterations (a cache line each).
var progress [spinners * 8]int64

//go:noinline
func spinHot(id int) uint64 {
	x := uint64(id + 1)
	for n := int64(1); atomic.LoadInt32(&stop) == 0; n++ {
		for i := 0; i < 1<<16; i++ {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		atomic.StoreInt64(&progress[id*8], n)
	}
	return x
}

func main() {
	// Rounds of 1<<16 iterations in all: 6000 are about 0.6 s of CPU here.
	rounds := int64(6000)
	if len(os.Args) > 1 {
		rounds, _ = strconv.ParseInt(os.Args[1], 10, 64)
	}
	runtime.GOMAXPROCS(2)
	var wg sync.WaitGroup
	results := make([]uint64, spinners)
	for g := 0; g < spinners; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			results[g] = spinHot(g)
		}(g)
	}
	gcs := 0
	for {
		var done int64
		for g := 0; g < spinners; g++ {
			done += atomic.LoadInt64(&progress[g*8])
		}
		if done >= rounds {
			break
		}
		runtime.GC() // stops the world: every spinner is preempted
		gcs++
		time.Sleep(time.Millisecond)
	}
	atomic.StoreInt32(&stop, 1)
	wg.Wait()
	nonzero := 0
	for _, r := range results {
		if r != 0 {
			nonzero++
		}
	}
	fmt.Printf("go_cgo_spin: %d spinners done, cgo says %d, preempted: %v\n", nonzero,
		C.cgo_add(1, 2), gcs > 0)
	// "return": as most Go programs end, a return from main, which is a
	// bare exit_group system call that runs no exit handler (the profile
	// is then the preload's last checkpoint). Otherwise through libc's
	// exit, which runs them and writes the whole profile.
	if len(os.Args) > 2 && os.Args[2] == "return" {
		return
	}
	C.exit(0)
}
