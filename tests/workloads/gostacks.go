// gostacks: complete stacks through Go functions the compiler gives no frame.
// Built by the tests with `go build` as `gostacks`, and with
// `-ldflags='-s -w'` (no symbol table, no DWARF: only .gopclntab names and
// unwinds it) as `gostacks_strip`.
//
// A goroutine (not main's) runs run(), which first recurses deep enough that
// the runtime moves its stack to a larger one, then calls w.Work(u) in a
// loop, with u varied around U:
//
//	Work → leafA (3 u iterations), then mid = makeMid.func1 → leafB (7 u)
//
// 10 u per round, every iteration the same loop body, so by construction:
//
//	exclusive: main.leafA 30 %, main.leafB 70 %
//	inclusive: main.run 100 %, main.(*Worker).Work 100 %,
//	           main.makeMid.func1 70 %
//
// leafA and leafB are leaves with no locals: the Go compiler gives them no
// frame (no SP adjustment, no saved BP), so a frame-pointer walk from them
// skips their caller (Work, makeMid.func1). Their loops are identical and
// each fits in one 32-byte block, so they run at the same speed.
//
// Usage: gostacks SECONDS [--ready]
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

const U = 100000

var sink uint64

//go:noinline
func leafA(n uint64) {
	for i := uint64(0); i < n; i++ {
		sink += i * 2654435761
	}
}

//go:noinline
func leafB(n uint64) {
	for i := uint64(0); i < n; i++ {
		sink += i * 2654435761
	}
}

type Worker struct{ rounds uint64 }

//go:noinline
func makeMid() func(uint64) {
	return func(n uint64) {
		leafB(n)
		sink++
	}
}

var mid = makeMid()

//go:noinline
func (w *Worker) Work(u uint64) {
	leafA(3 * u)
	mid(7 * u)
	w.rounds++
}

var x uint64 = 88172645463325252

func vary(n uint64) uint64 {
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	return n/2 + x%n
}

//go:noinline
func grow(depth int) int {
	var pad [256]byte
	pad[depth%256] = byte(depth)
	if depth == 0 {
		return int(pad[0])
	}
	return grow(depth-1) + int(pad[depth%256])
}

func run(deadline time.Time, done chan<- struct{}) {
	grow(2000) // moves this goroutine's stack to a larger one
	w := &Worker{}
	for time.Now().Before(deadline) {
		w.Work(vary(U))
	}
	done <- struct{}{}
}

func main() {
	secs, err := strconv.ParseFloat(os.Args[1], 64)
	if err != nil {
		os.Exit(2)
	}
	if len(os.Args) > 2 {
		fmt.Println("ready")
	}
	done := make(chan struct{})
	go run(time.Now().Add(time.Duration(secs*float64(time.Second))), done)
	<-done
}
