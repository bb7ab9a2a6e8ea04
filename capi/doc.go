// Command capi is gorun's C ABI, built as a shared library:
//
//	scripts/build-capi.sh    # build/capi/libgorun.so and gorun.pc (an rpath for the linker)
//
// include/gorun.h (written by hand, stable) declares what it exports. Handles
// are integers into tables kept here, so C never holds Go pointers. Every
// exported function recovers panics and returns codes; the message of a
// thread's last failure is kept in C thread-local storage. An argument
// refused on a communicator goes through comm.Refuse (refuse): the call
// fails on every rank, naming this one, and the communicator is aborted.
package main

func main() {} // required by -buildmode=c-shared; never run
