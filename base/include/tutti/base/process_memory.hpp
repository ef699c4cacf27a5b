#pragma once
// How the process's heap hands memory back, set once at start by the
// programs that hold a model (tutti, tuttid).
//
// glibc serves a large allocation with its own mmap and unmaps it on free,
// but after the first such free it raises that threshold to the freed
// size (up to 32 MiB), so later tensors of a few MiB come from the
// threads' heap arenas instead. A checkpoint's host copies, taken and
// freed by several rank threads at once, then stay resident as arena
// fragments: the process's peak grew by 100-170 MB from run to run on a
// TP2 job, beyond what `tutti plan` can predict. A fixed threshold keeps
// every tensor-sized buffer in its own mapping, returned when freed.
// The cost, a page fault per fresh page of such buffers, did not show in
// a training step here (buffers that live across steps are reused).

#include <malloc.h>

namespace tutti {

inline void return_large_buffers_on_free() {
#ifdef M_MMAP_THRESHOLD
  // Fixing the threshold also stops glibc adjusting it.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
}

} // namespace tutti
