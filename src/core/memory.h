// Process-wide memory settings.
//
// A scheduling pass over a large cluster allocates and frees tens of MB: contexts
// for every pending job, the shape table, the decisions. By default glibc gives
// large freed blocks back to the kernel (munmap, heap trimming), so the next pass
// touches fresh pages again and pays a page fault per 4 KiB; on the virtual machines
// clusters' control planes often run on, a fault costs 10-25 us, which made page
// faults about a third of a 100,000-job pass. Processes that run passes over and
// over (the server, the simulator) keep freed memory for reuse instead: their
// resident size stays at its peak rather than falling between passes.
#pragma once

namespace trainyard {

// Large blocks come from the heap and freed memory is kept (glibc: M_MMAP_THRESHOLD
// 32 MiB, M_TRIM_THRESHOLD 1 GiB). Call once, early, before threads start. No-op
// where the C library offers no such setting.
void KeepFreedMemoryForReuse();

}  // namespace trainyard
