// Package jobctl is the job control channel between the gorun launcher and
// the ranks it starts. The launcher runs a Server and hands its address to
// every rank in GORUN_CONTROL; ranks report their progress through a Client
// (FromEnv) so the launcher can show a live view of a starting job, name
// the ranks stuck in a collective when the job hangs, and name the rank a
// failure started from (Blame: "my operation failed because of rank X").
//
// Protocol: one TCP connection per rank. The server greets with
// "gorun-jobctl 1 NONCE\n"; the client then sends lines "MAC JSON\n", where
// MAC is hex(HMAC-SHA256(token, NONCE "\n" COUNTER "\n" JSON)), COUNTER
// counts the lines of this connection from 0 and the token is the job's
// GORUN_JOB_TOKEN. A line with a bad MAC or out of order ends the connection.
// The channel is diagnostic only: it never fails a job.
//
// Ownership: the launcher (launcher/) owns this package. Concurrency: Server
// methods are safe for concurrent use. Client methods are safe for concurrent
// use and never block; a nil *Client is a valid no-op client. State set by
// concurrent Enter/Leave calls is last-writer-wins.
package jobctl
