// Package dara states properties for dara, the same five as sdk/c/dara.h:
//
//	dara.Always(balance >= 0, "no overdraft")        // holds at every evaluation
//	dara.Sometimes(bothPassed, "both passed")        // holds in some execution (a goal)
//	dara.Reachable("a transfer refused")             // reached in some execution (a goal)
//	dara.Unreachable("negative transfer")            // never reached
//	dara.Eventually(total == 100, "money conserved") // holds by the end of each execution
//
// The name names the property: a broken one is a bug with that name. Outside dara a call costs
// an atomic load and a branch (the descriptor is looked up once); under dara it writes one line
// to the descriptor DARA_SDK_FD names, with one write system call (docs/properties.md). Goals
// that no execution reaches are not listed: unlike the C header, the package cannot declare its
// properties before their first evaluation.
package dara

import (
	"os"
	"strconv"
	"sync"
	"syscall"
)

var (
	once sync.Once
	fd   = -1
)

func sdkFd() int {
	once.Do(func() {
		if v, err := strconv.Atoi(os.Getenv("DARA_SDK_FD")); err == nil && v >= 0 {
			fd = v
		}
	})
	return fd
}

func emit(kind string, held int, name string) {
	f := sdkFd()
	if f < 0 {
		return
	}
	line := make([]byte, 0, len(kind)+len(name)+4)
	line = append(line, kind...)
	line = append(line, ' ')
	if held >= 0 {
		line = append(line, byte('0'+held), ' ')
	}
	if len(name) > 1000 {
		name = name[:1000]
	}
	line = append(line, name...)
	line = append(line, '\n')
	syscall.Write(f, line)
}

func held(cond bool) int {
	if cond {
		return 1
	}
	return 0
}

// Always: cond holds at every evaluation; a false one is a bug named name.
func Always(cond bool, name string) { emit("always", held(cond), name) }

// Sometimes: cond holds at some evaluation of some execution (a goal the search reports).
func Sometimes(cond bool, name string) { emit("sometimes", held(cond), name) }

// Reachable: this point is reached in some execution (a goal the search reports).
func Reachable(name string) { emit("reachable", -1, name) }

// Unreachable: this point is never reached; reaching it is a bug named name.
func Unreachable(name string) { emit("unreachable", -1, name) }

// Eventually: cond holds at some evaluation of each execution, by its end; an execution in
// which it never held is a bug named name.
func Eventually(cond bool, name string) { emit("eventually", held(cond), name) }
