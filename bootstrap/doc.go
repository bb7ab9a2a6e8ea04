// Package bootstrap lets the ranks of one job find each other with no
// central server, agree on one view of the world, and hear about failures.
// It is built on hashicorp/memberlist (SWIM gossip with Lifeguard).
//
// Ownership: the bootstrap helper owns this package; comm.Init is its only
// caller in gorun. Nothing here imports comm.
//
// # Joining
//
// Each rank calls Join (or Start, then Form) with a Config: its job id, the
// job token, its rank (or -1 to be assigned one) and the world size, a
// gossip address (port 0 picks one), and the seeds (GORUN_SEEDS). A rank
// whose own address is a seed skips itself; the others contact the seeds
// until one answers (seeds start at the same time as everyone, so failures
// are retried, with jitter: a seed refuses more than 128 pending
// push/pulls). A joined node does not sync with the seeds again while it
// forms: that cost the seed O(n) syncs of O(n) bytes each at every
// formation. Once formed, it joins the seeds again only if no live member
// is at a seed address: a restarted seed rank is its own seed and joins
// nobody, so a few members (four, expected, per second) join it (seeds.go).
// Beyond 64 ranks a node forming the first world sends the seeds a hello
// instead, and joins memberlist through its parent in the table tree once
// the world is agreed (hello.go).
//
// Every node publishes its metadata in its memberlist node meta: rank,
// size, job id, host identity (hostname plus a hash of the boot id, for
// locality) and an opaque blob of at most MaxBlob (320) bytes — comm puts
// its transport endpoints there. The encoding is versioned and compact
// (meta.go); its worst case is 464 bytes, under memberlist's 512-byte
// limit. Oversize fields are refused with ErrMetaTooLarge.
//
// # Isolation
//
// Gossip is encrypted with AES-256-GCM under a key derived from the job
// token with HKDF-SHA-256 (GossipKey), so a node without the token can
// neither read nor inject anything. Nodes of another job that share the
// token are refused by an AliveDelegate and a MergeDelegate that check the
// job id in the meta. An empty token disables encryption (trusted networks
// only).
//
// # Agreement
//
// Gossip is only eventually consistent: two ranks may, for a while, see
// different members. Before any connection is made, the ranks agree on one
// table (rank → node, address, host, blob) for an epoch (1 for the first
// world), as follows:
//
//  1. Each node derives the table from its current view: assigned ranks
//     keep their rank (of two nodes claiming one rank, the smaller name
//     wins); unassigned nodes, sorted by (host, name), fill the free ranks
//     in order. The table is complete when all Size ranks are filled.
//  2. The node hashes the complete table (SHA-256 of a canonical encoding,
//     with job id and epoch) into a digest D and sends propose(D) to the
//     table's rank 0, the coordinator (a memberlist user message: UDP,
//     encrypted like all gossip).
//  3. When every member proposed the digest of the coordinator's own
//     table, the coordinator locks on D and sends prepare(D) to all.
//  4. A member whose table still hashes to D when prepare(D) arrives from
//     its table's coordinator locks on D — from then on it takes no other
//     table in this epoch, whatever it later sees — and answers ack(D).
//     In a Shrink or Grow, a member also locks on a D it proposed earlier
//     in this epoch if its table now holds all of D's members: a second
//     joiner, or a member back from a false death, seen between its
//     propose and the prepare changes its table, and the coordinator,
//     locked on D, would wait for its ack for ever. The joiner waits for
//     the next Grow; the member back is expelled (ErrExpelled).
//  5. When every member acked, the coordinator commits: it sends commit(D)
//     to all and finishes; a locked member finishes on commit(D).
//
// A member need not see every other member: at a thousand members the
// last joins take many gossip rounds to reach everyone. Once the
// coordinator's complete table has been unchanged for two gossip rounds
// with no conflict in it, it prepares without waiting for every proposal,
// and the prepare carries the table (table.go): over TCP, down an 8-ary
// tree over the ranks, so each member receives it about once. A member
// merges it into its own view (its own records win) and locks only if
// the table it derives from the merged view hashes to D. This holds in
// the first epoch; Shrink and Grow keep waiting for every proposal, so a
// member that is leaving never enters a prepared table.
//
// Every message is resent until the next step arrives, and repeats are
// answered (a committed coordinator answers a late propose or ack with
// the commit; a locked member answers a repeated prepare with its ack), so
// lost UDP packets only cost time. Beyond 64 members a repeat, and the
// answer to one, goes over a stream (msg.go, resend): while gossip fills
// the views of hundreds of members a receive queue may drop every packet
// of a few senders for tens of seconds. This is two-phase commit: a commit of D
// needs every member locked on D, and a locked node never locks on
// another digest, so two committed tables of one epoch cannot share a
// member, and every rank that finishes holds the same table, blobs
// included (the digest covers them). It costs 4·(Size−1) one-hop
// messages once the view is complete (plus at most 8 table sends per
// member), instead of waiting for Size meta updates to gossip to every
// node: O(1) agreement messages per member and O(n) at the coordinator.
// A rank that dies while the first world forms (memberlist's dead
// verdict with its last call unanswered, or a refused gossip port; never
// suspicion alone, nor a process Config.Running shows running here), or
// leaves because its own Form failed, ends Form on every other rank at
// once with a *FormError whose Cause is an *OpError naming it: the first
// world has none to fall back on, and one smaller than Size is not what
// Init promises (formloss.go). A locked member gives up only for its
// coordinator, the locked coordinator only for a member it awaits, so a
// committed world and a failed Form share a rank only when the coordinator
// died after its commit, and then that world holds a dead member, which
// every rank of it hears of. A Shrink or Grow has the
// old world to fall back on: a locked node that finds a member it waits
// for gone (evidence.go, witness.go), or dropped by gossip with no answer
// to the last call (lost.go), tells the others and agrees again, on the
// old world without it, in the next epoch.
//
// If the world does not form before the context is done (or
// Config.Timeout passes), Join returns a *FormError naming the ranks seen,
// the ranks missing, the ranks that did not agree (on the coordinator),
// and why joining the seeds failed, if it did.
//
// # Failures and Shrink
//
// Once formed, memberlist's dead and left events for a member of the
// world become Failure values on Failures(): ErrPeerDead for a crash
// detected by probes, ErrPeerLeft for a rank that Closed (before it leaves
// it tells the world's members directly and sets a leaving flag in its
// meta, so that the gossiped departure is not taken for a crash). Failure
// detection is tuned in DefaultLANConfig (see its comment): a rank that
// stops answering is reported about 1.25 s later on a LAN (a killed one
// usually at once, by a refused connection: evidence.go). Before a gossip
// death is reported the node pings the member itself (the last call,
// lastcall.go): one that answers is not reported, since this node's own
// lateness may have made the verdict.
//
// A member that gives up on its world for a reason of its own (comm: its
// Init failed after the first world formed) calls Abandon rather than
// Close: it tells the world's members why, the kind of its error and whom
// it blames, and they report it with an *AbandonError (ErrPeerAbandoned),
// a failure, not a leave; a member still waiting for that world's commit
// takes it for the commit (abandon.go).
//
// On one host the kernel is a better witness than a missed probe: a
// member whose process /proc shows running or sleeping there
// (Config.Running) is not reported when gossip declares it dead, since a
// process starved of CPU on a loaded host misses its probes (CI saw live
// ranks reported dead at load 15-50). It is reported as soon as the
// evidence says it is gone: its gossip port refuses a connection
// (evidence.go) or a witness sees it stopped or gone (witness.go).
//
// Shrink lets the survivors agree on the next world: the members of the
// current world still alive, renumbered in the order of their old ranks,
// in epoch+1, by the same protocol. Every survivor must call it. A member
// that gossip dropped but that Config.Running shows running stays in it,
// as it stays unreported. Each world reports its members anew
// (Failure.Epoch names it): a member reported dead that comes back before
// the Shrink (a cut link healed) is kept, and reported in the new world
// when it dies.
//
// Grow admits the ranks waiting to join (grow.go): every live rank of the
// job, in the order they were started with. A member of the current world
// that is out of the view is left out only once it is known gone
// (evidence, a leave, or a gossip death whose last call went unanswered):
// two committed tables of one epoch cannot share a member, but they can
// be disjoint, and members that took each other for dead for a moment (a
// rank back from a partition spreads the deaths it saw as it rejoins)
// grew into disjoint worlds.
//
// # Concurrency
//
// Node methods are safe for concurrent use, except that Form and Shrink
// must not run concurrently with each other. memberlist calls the
// delegates (delegate.go) with its own node lock held; they only copy data
// under short critical sections and never call back into memberlist, and
// no lock of this package is held across a memberlist call. Close leaves,
// shuts memberlist down and waits for the goroutines this package started;
// memberlist's own goroutines exit shortly after.
package bootstrap
