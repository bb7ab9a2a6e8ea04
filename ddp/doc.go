// Package ddp is data-parallel training on gorun, in the manner of PyTorch's
// DistributedDataParallel and Horovod: every rank holds a replica of the
// model, trains on its own shard of the data, and averages gradients across
// ranks before each optimizer step, so the replicas stay identical and the
// result equals training one model on the combined batch.
//
// The pieces:
//   - CheckShapes verifies at start that every rank has the same parameters
//     (a clear error naming the rank and the tensor otherwise);
//   - BroadcastParameters copies the root's initial values to every rank;
//   - a Bucketer fuses gradients into buckets (default 25 MiB, the first one
//     small, as DDP does) whose storage the gradients are views into, and
//     starts a non-blocking allreduce for a bucket as soon as its last
//     gradient is marked ready and the buckets before it have started, so
//     communication overlaps the rest of the backward pass. Buckets start
//     in index order on every rank, as in torch's Reducer: a rank that
//     leaves a parameter unmarked (unused in its forward pass) holds the
//     later buckets back until Wait, which starts the rest in order, and the
//     ranks' allreduces still pair the same buckets. Wait before the
//     optimizer step.
//
// Ranks pair collectives in the order they start on a communicator, and a
// Bucketer orders only its own buckets: when ranks leave different
// parameters unused, a rank starts some buckets only in Wait, so another
// collective started on the same communicator between the step's first
// MarkReady and Wait (a second Bucketer's bucket, a loss's allreduce)
// pairs with a bucket on some ranks: a mismatch error, or with the same
// type and length, silently mixed sums. Run such collectives after Wait
// or on a communicator of their own (Comm.Dup). Gradients of one Bucketer
// share an element type (float32 or float64); a model with both uses two,
// each on its own communicator.
//
// Optional fp16 or bf16 compression halves the bytes on the wire: each
// rank rounds its gradients to the wire type, and the partial sums travel
// in it too (each hop adds in float32 and rounds again), so every partial
// sum must fit the wire type (fp16: |x| ≤ 65504). With Avg each rank first
// divides by the world size, then the ranks sum (torch's
// fp16_compress_hook does the same), so an average that fits arrives even
// when the sum would not; the price is that gradients below the wire
// type's smallest value times the world size round to zero. With Sum the
// values are rounded as they are and the sum must fit.
//
// Uneven inputs, as PyTorch DDP's join(): with Config.UnevenInputs, ranks
// may run out of batches at different steps. A rank that has run out calls
// Bucketer.Join, and takes part in the others' steps with zero gradients
// until every rank has joined; Join returns the rank that joined last,
// from which the others then copy the parameters (BroadcastParameters).
// Every step the ranks count those still training, in one allreduce of one
// int64 started before the step's first bucket, and Avg divides by that
// count (the buckets travel as sums; with compression each rank still
// divides by the world size first, and Wait multiplies by world size over
// count). Without UnevenInputs a step makes only its buckets' allreduces,
// and a rank that stops early leaves the others waiting in their next
// step until their timeout.
//
// A step that does not complete in time fails the communicator: when
// Wait's context ends before the step's allreduces do (a rank that never
// reaches the step), Wait aborts the communicator (Comm.Abort), waits
// for the allreduces to end, which the abort makes prompt, and returns a
// *comm.RankError naming this rank and wrapping the context's error. So,
// as with torch's DDP, whose watchdog aborts the communicator on a
// timeout, nothing writes the gradients after Wait returns, and the
// caller may zero them at once. The peers' operations fail naming this
// rank (a peer that already had this rank's part of the step may still
// complete it, and fails at its next one), as after any other failure
// (Comm.Shrink makes a new communicator of the live ranks).
//
// Concurrency: a Bucketer belongs to one training loop (one goroutine),
// which calls Wait and Join; MarkReady may be called from the goroutine
// running the backward pass while earlier buckets are in flight.
package ddp
