//go:build !race

package tcp

func raceReleaseIO() {}

const raceEnabled = false
