package dev.flagstream;

import java.util.List;

/**
 * One applied revision, as a change listener sees it.
 *
 * @param revision the revision now served
 * @param flags the keys of the flags it added, changed or removed (empty
 *     when {@code missed})
 * @param missed true when changes came faster than the listener took them:
 *     the keys are unknown, re-read whatever you cache
 */
public record Change(long revision, List<String> flags, boolean missed) {
    /**
     * Copies {@code flags} (unmodifiable).
     *
     * @param revision the revision now served
     * @param flags the keys of the flags changed
     * @param missed whether changes were missed
     */
    public Change {
        flags = List.copyOf(flags);
    }
}
