package reliability

import "runtime"

var trialSlots = make(chan struct{}, 2)

func runtimeCPUs() int { return runtime.NumCPU() }

func runChild(role string) int {
	if role == "echo" {
		return childEcho()
	}
	return 2
}
