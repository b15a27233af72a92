// gobench: the Go twins of goshim's scale benchmarks (tests/progs/pbench_*.c),
// with the same arguments and the same one-line output, so that
// scripts/bench_scale.sh can print native | goshim | Go from one run.
//
//	gobench blocked N [cond|sleep [STACK_KIB]]  pbench_blocked_threads: N goroutines block
//	                                           on one sync.Cond (or sleep 500 ms), released,
//	                                           waited for; "seconds=X peak_rss_kb=Y threads=N"
//	gobench create seq N | batch B S           pbench_create_join: start a goroutine and wait
//	                                           for it; "ns_per_op=X threads=N"
//	gobench yield T K                          pbench_yield: T goroutines call
//	                                           runtime.Gosched K times; "ns_per_op=X yields=N"
//	gobench pingpong ROUNDS                    pbench_cond_pingpong: two goroutines hand a turn
//	                                           through one Mutex and two Conds; "ns_per_op=X handoffs=N"
//
// STACK_KIB is accepted and ignored: goroutine stacks start at 2 KiB and grow.
// GOMAXPROCS is Go's default (the usable CPUs), as goshim's P count.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: gobench blocked N [cond|sleep [STACK_KIB]] | create seq N | create batch B S | yield T K | pingpong ROUNDS")
	os.Exit(1)
}

func arg(i int) int64 {
	if i >= len(os.Args) {
		usage()
	}
	v, err := strconv.ParseInt(os.Args[i], 10, 64)
	if err != nil || v < 1 {
		usage()
	}
	return v
}

func peakRSSKiB() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Maxrss
}

const sleepMs = 500 // as pbench_blocked_threads

func blocked(n int64, sleep bool) {
	var mu sync.Mutex
	startedCv := sync.NewCond(&mu)
	goCv := sync.NewCond(&mu)
	var started, finished int64
	var wg sync.WaitGroup
	gate := false
	t0 := time.Now()
	wg.Add(int(n))
	for i := int64(0); i < n; i++ {
		if sleep {
			go func() {
				time.Sleep(sleepMs * time.Millisecond)
				mu.Lock()
				finished++
				mu.Unlock()
				wg.Done()
			}()
			continue
		}
		go func() {
			mu.Lock()
			started++
			if started == n {
				startedCv.Signal()
			}
			for !gate {
				goCv.Wait()
			}
			finished++
			mu.Unlock()
			wg.Done()
		}()
	}
	if !sleep {
		mu.Lock()
		for started < n {
			startedCv.Wait()
		}
		gate = true
		goCv.Broadcast()
		mu.Unlock()
	}
	wg.Wait()
	secs := time.Since(t0).Seconds()
	if sleep {
		secs -= sleepMs / 1000.0
	}
	if finished != n {
		fmt.Fprintf(os.Stderr, "gobench: %d finished of %d\n", finished, n)
		os.Exit(3)
	}
	fmt.Printf("seconds=%.3f peak_rss_kb=%d threads=%d\n", secs, peakRSSKiB(), n)
}

func create(batches, size int64) {
	t0 := time.Now()
	var wg sync.WaitGroup
	for b := int64(0); b < batches; b++ {
		wg.Add(int(size))
		for i := int64(0); i < size; i++ {
			go func() { wg.Done() }()
		}
		wg.Wait()
	}
	total := batches * size
	fmt.Printf("ns_per_op=%.1f threads=%d\n", float64(time.Since(t0).Nanoseconds())/float64(total), total)
}

func yield(t, k int64) {
	var total int64
	var wg sync.WaitGroup
	t0 := time.Now()
	wg.Add(int(t))
	for i := int64(0); i < t; i++ {
		go func() {
			var j int64
			for j = 0; j < k; j++ {
				runtime.Gosched()
			}
			atomic.AddInt64(&total, j)
			wg.Done()
		}()
	}
	wg.Wait()
	ns := float64(time.Since(t0).Nanoseconds())
	if total != t*k {
		fmt.Fprintf(os.Stderr, "gobench: %d yields, expected %d\n", total, t*k)
		os.Exit(3)
	}
	fmt.Printf("ns_per_op=%.1f yields=%d\n", ns/float64(total), total)
}

func pingpong(rounds int64) {
	var mu sync.Mutex
	cv := [2]*sync.Cond{sync.NewCond(&mu), sync.NewCond(&mu)}
	var turn int64
	var wg sync.WaitGroup
	t0 := time.Now()
	wg.Add(2)
	for me := int64(0); me < 2; me++ {
		go func(me int64) {
			mu.Lock()
			for i := int64(0); i < rounds; i++ {
				for turn%2 != me {
					cv[me].Wait()
				}
				turn++
				cv[1-me].Signal()
			}
			mu.Unlock()
			wg.Done()
		}(me)
	}
	wg.Wait()
	ns := float64(time.Since(t0).Nanoseconds())
	if turn != 2*rounds {
		fmt.Fprintf(os.Stderr, "gobench: turn %d, expected %d\n", turn, 2*rounds)
		os.Exit(3)
	}
	fmt.Printf("ns_per_op=%.1f handoffs=%d\n", ns/float64(2*rounds), 2*rounds)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "blocked":
		n := arg(2)
		sleep := false
		if len(os.Args) > 3 {
			switch os.Args[3] {
			case "sleep":
				sleep = true
			case "cond":
			default:
				usage()
			}
		}
		blocked(n, sleep)
	case "create":
		if len(os.Args) > 2 && os.Args[2] == "seq" {
			create(arg(3), 1)
		} else if len(os.Args) > 2 && os.Args[2] == "batch" {
			create(arg(3), arg(4))
		} else {
			usage()
		}
	case "yield":
		yield(arg(2), arg(3))
	case "pingpong":
		pingpong(arg(2))
	default:
		usage()
	}
}
