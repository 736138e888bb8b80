// Heap settings for a process that receives large streams (a worker taking weight pushes): glibc
// hands freed heap memory back to the system as soon as 128 KiB sit free at the top of an arena,
// and serves allocations above its (moving) mmap threshold from fresh mappings, so every few-MiB
// gRPC receive buffer and message of a push was faulted in and cleared again (on the development VM
// a tenth of a worker's time during a push, in recvmsg alone).
#pragma once

namespace astr::rpc {

// Keeps up to 64 MiB of freed memory at the top of each arena and serves allocations up to
// 32 MiB from the heap, so they are reused from message to message. Long-lived memory is
// unaffected; malloc_trim(0) still returns what is free. Call first thing in main(). Not for the
// scheduler: it forwards pushes as gRPC's own buffers, and its memory must come back after bursts
// of work (test_hostile_constraints).
//
// It also caps the arenas at one per four cores (at least two; glibc's default is eight per
// core): each keeps its own free memory, and the gRPC threads that received successive pushes
// each had one, so a worker's peak during a 1.7 GB update was 2.25-2.27x the weights instead of
// 2.15-2.17x (astr-bench-refit and docs/benchmarks.md, 2 cores; the pushes' speed unchanged).
void KeepFreedMemoryForStreams();

}  // namespace astr::rpc
