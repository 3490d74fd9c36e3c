package dev.flagstream;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.URL;
import java.net.URLConnection;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.Locale;

/**
 * Loads {@code libflagstream_jni.so} (the JNI glue with the whole Rust
 * client linked in) once per class loader.
 *
 * <p>Rules, in order:
 * <ol>
 * <li>System property {@value #PATH_PROPERTY}: load that file as it is.</li>
 * <li>Otherwise extract the jar's copy
 *     ({@code /flagstream/native/<os>-<arch>/libflagstream_jni.so}) into a
 *     directory: system property {@value #DIR_PROPERTY}, else environment
 *     variable {@value #DIR_ENV}, else {@code $XDG_CACHE_HOME/flagstream/native},
 *     else {@code ~/.cache/flagstream/native} (never /tmp, often noexec). The
 *     file is named by the SHA-256 of its content, so versions never clash
 *     and an identical file already there is reused; a new one is written
 *     under a temporary name and renamed into place atomically.</li>
 * <li>{@code System.load} it, then check that it implements the C ABI
 *     version and glue version this jar was written for.</li>
 * </ol>
 * Any failure is an {@link UnsatisfiedLinkError} naming the directory or
 * file and the property or variable to set. A failed attempt is retried
 * on the next use (after fixing the setting).
 */
final class NativeLoader {
    /** Load this file instead of extracting the jar's copy. */
    static final String PATH_PROPERTY = "flagstream.native.path";
    /** Extract into this directory. */
    static final String DIR_PROPERTY = "flagstream.native.dir";
    /** Extract into this directory (when the property is not set). */
    static final String DIR_ENV = "FLAGSTREAM_NATIVE_DIR";
    /** The C ABI version ({@code FLAGSTREAM_ABI_VERSION}) this jar is written for. */
    static final int ABI_VERSION = 1;
    /** Where the jar keeps the library (then the platform, then the file name). */
    static final String RESOURCE_DIR = "/flagstream/native/";
    static final String LIBRARY = "libflagstream_jni.so";

    private static volatile boolean loaded;

    private NativeLoader() {}

    /** Loads the library unless it was loaded; throws {@link UnsatisfiedLinkError} saying what to fix. */
    static void ensureLoaded() {
        if (loaded) {
            return;
        }
        synchronized (NativeLoader.class) {
            if (!loaded) {
                load();
                loaded = true;
            }
        }
    }

    private static void load() {
        String path = System.getProperty(PATH_PROPERTY);
        Path file;
        String where;
        if (path != null && !path.isEmpty()) {
            file = Path.of(path).toAbsolutePath();
            where = "the file " + file + " (system property " + PATH_PROPERTY + ")";
        } else {
            Path dir = nativeDir();
            file = extract(dir);
            where = "the file " + file + " extracted to the directory " + dir;
        }
        try {
            System.load(file.toString());
        } catch (UnsatisfiedLinkError e) {
            throw new UnsatisfiedLinkError("flagstream: cannot load " + where + " (" + e.getMessage() + "). "
                    + "If the directory is on a noexec file system, " + howToChoose() + ".");
        }
        int abi = Native.abiVersion();
        int glue = Native.glueVersion();
        if (abi != ABI_VERSION || glue != Native.GLUE_VERSION) {
            throw new UnsatisfiedLinkError("flagstream: " + where + " implements C ABI version " + abi
                    + " and JNI glue version " + glue + ", but this jar expects ABI " + ABI_VERSION + " and glue "
                    + Native.GLUE_VERSION + ": use the libflagstream_jni.so built with this jar (sdk/java/build.sh)");
        }
    }

    private static String howToChoose() {
        return "set the system property " + DIR_PROPERTY + " or the environment variable " + DIR_ENV
                + " to a writable directory on a file system that allows executable mappings, or the system property "
                + PATH_PROPERTY + " to a libflagstream_jni.so to load as it is";
    }

    /** The extraction directory, by the rules above. */
    static Path nativeDir() {
        String dir = System.getProperty(DIR_PROPERTY);
        if (dir == null || dir.isEmpty()) {
            dir = System.getenv(DIR_ENV);
        }
        if (dir != null && !dir.isEmpty()) {
            return Path.of(dir).toAbsolutePath();
        }
        String xdg = System.getenv("XDG_CACHE_HOME");
        if (xdg != null && Path.of(xdg).isAbsolute()) {
            return Path.of(xdg, "flagstream", "native");
        }
        return Path.of(System.getProperty("user.home"), ".cache", "flagstream", "native");
    }

    /** {@code linux-x86_64}, {@code linux-aarch64}, ... */
    static String platform() {
        String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
        String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
        if (os.startsWith("linux")) {
            os = "linux";
        } else if (os.startsWith("mac")) {
            os = "macos";
        }
        if (arch.equals("amd64") || arch.equals("x86_64")) {
            arch = "x86_64";
        } else if (arch.equals("arm64")) {
            arch = "aarch64";
        }
        return os + "-" + arch;
    }

    /**
     * Extracts the jar's library into {@code dir} (made if missing) and
     * returns the file: one already there with the same name (the content's
     * hash) and size is reused.
     */
    static Path extract(Path dir) {
        String resource = RESOURCE_DIR + platform() + "/" + LIBRARY;
        URL url = NativeLoader.class.getResource(resource);
        if (url == null) {
            throw new UnsatisfiedLinkError("flagstream: this jar has no native library for " + platform()
                    + " (no resource " + resource + "); build one with sdk/java/build.sh and set the system property "
                    + PATH_PROPERTY + " to it");
        }
        String expected = readHash(resource + ".sha256");
        try {
            Files.createDirectories(dir);
        } catch (IOException | SecurityException e) {
            throw notWritable(dir, e);
        }
        try {
            long size = -1;
            if (expected != null) {
                URLConnection conn = url.openConnection();
                conn.setUseCaches(false);
                size = conn.getContentLengthLong();
                Path known = dir.resolve(fileName(expected));
                if (size >= 0 && Files.isRegularFile(known) && Files.size(known) == size) {
                    return known;
                }
            }
            Path tmp;
            try {
                tmp = Files.createTempFile(dir, ".libflagstream_jni-", ".tmp");
            } catch (IOException | SecurityException e) {
                throw notWritable(dir, e);
            }
            try {
                MessageDigest sha = MessageDigest.getInstance("SHA-256");
                URLConnection conn = url.openConnection();
                conn.setUseCaches(false);
                try (InputStream in = conn.getInputStream(); OutputStream out = Files.newOutputStream(tmp)) {
                    byte[] buf = new byte[1 << 16];
                    for (int n; (n = in.read(buf)) > 0; ) {
                        sha.update(buf, 0, n);
                        out.write(buf, 0, n);
                    }
                }
                String hash = HexFormat.of().formatHex(sha.digest());
                if (expected != null && !expected.equals(hash)) {
                    throw new UnsatisfiedLinkError("flagstream: the jar's " + resource + " has SHA-256 " + hash
                            + ", not the " + expected + " recorded next to it: the jar is damaged");
                }
                Files.setPosixFilePermissions(tmp, PosixFilePermissions.fromString("rwxr-xr-x"));
                Path target = dir.resolve(fileName(hash));
                // Atomic: a concurrent extraction renames an identical file.
                Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
                return target;
            } finally {
                Files.deleteIfExists(tmp);
            }
        } catch (IOException | SecurityException e) {
            throw notWritable(dir, e);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JDK", e);
        }
    }

    private static String fileName(String hash) {
        return "libflagstream_jni-" + hash.substring(0, 32) + ".so";
    }

    private static String readHash(String resource) {
        try (InputStream in = NativeLoader.class.getResourceAsStream(resource)) {
            if (in == null) {
                return null;
            }
            String text = new String(in.readAllBytes(), StandardCharsets.US_ASCII).trim();
            return text.matches("[0-9a-f]{64}") ? text : null;
        } catch (IOException e) {
            return null;
        }
    }

    private static UnsatisfiedLinkError notWritable(Path dir, Exception cause) {
        UnsatisfiedLinkError e = new UnsatisfiedLinkError("flagstream: cannot extract the native library to the directory "
                + dir + " (" + cause + "); " + howToChoose());
        e.initCause(cause);
        return e;
    }
}
