package dev.flagstream;

import java.lang.ref.Cleaner;

/** The package's one {@link Cleaner} (a daemon thread): frees native handles whose owner was collected. */
final class Cleaners {
    static final Cleaner CLEANER = Cleaner.create();

    private Cleaners() {}
}
