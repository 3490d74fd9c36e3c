package dev.flagstream;

/**
 * A copy of a client's counters (the Rust {@code flagstream::Stats}).
 *
 * @param defaultNotFound evaluations that returned the default: no such flag
 * @param defaultNotReady evaluations that returned the default: no data yet
 * @param defaultWrongType evaluations that returned the default: the flag's type is not the one asked for
 * @param defaultMalformed evaluations that returned the default: the flag cannot be evaluated
 * @param connects streams opened
 * @param reconnects streams reopened after one ended
 * @param endpointSwitches moves to another relay
 * @param stalls streams found silent and abandoned
 * @param resyncs full snapshots asked for after a gap
 * @param checksumMismatches data whose checksum did not match
 * @param divergedHeads relays found on another history
 * @param retryHints retry hints received from a relay
 * @param snapshotsApplied full snapshots applied
 * @param deltasApplied deltas applied
 * @param cacheWrites cache writes
 * @param cacheErrors failed cache reads or writes
 * @param staleMs how long the served data has been stale, in milliseconds
 */
public record Stats(
        long defaultNotFound,
        long defaultNotReady,
        long defaultWrongType,
        long defaultMalformed,
        long connects,
        long reconnects,
        long endpointSwitches,
        long stalls,
        long resyncs,
        long checksumMismatches,
        long divergedHeads,
        long retryHints,
        long snapshotsApplied,
        long deltasApplied,
        long cacheWrites,
        long cacheErrors,
        long staleMs) {

    /** The number of counters, in the order of the C struct. */
    static final int COUNT = 17;

    static Stats of(long[] v) {
        return new Stats(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13],
                v[14], v[15], v[16]);
    }
}
