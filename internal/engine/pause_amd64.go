package engine

// spinPause is a PAUSE instruction, the spin-wait hint (about 23 ns on
// this host's AMD EPYC, call included): an idle poll that spins without
// yielding (wait.go) pauses once before the next, so that it reads the
// lines its peer is about to write a little less often. 2 ranks on shm, 8
// B allreduce, near placement, interleaved in alternating order: 1 PAUSE
// faster in 9 of 10 pairs twice (1.2-1.6%), barrier in 6 of 8; 4 PAUSEs
// slower than 1 in 8 of 10 (far placement). 2026-11-27.
func spinPause()
