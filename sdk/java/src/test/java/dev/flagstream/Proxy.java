package dev.flagstream;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A TCP proxy to a target that can stop forwarding without closing anything
 * (a blackhole: no FIN, no RST), like a dead network path; as the Python
 * suite's conftest.py. Every socket is kept referenced (so no Cleaner
 * closes it) until {@link #close()}.
 */
final class Proxy implements AutoCloseable {
    private final String targetHost;
    private final int targetPort;
    private final ServerSocket listener;
    private final List<Socket> sockets = new CopyOnWriteArrayList<>();
    private volatile boolean blackholed;
    private volatile boolean closed;

    Proxy(String target) throws IOException {
        int colon = target.lastIndexOf(':');
        targetHost = target.substring(0, colon);
        targetPort = Integer.parseInt(target.substring(colon + 1));
        listener = new ServerSocket(0, 16, InetAddress.getLoopbackAddress());
        Thread t = new Thread(this::accept, "proxy-accept");
        t.setDaemon(true);
        t.start();
    }

    String url() {
        return "http://127.0.0.1:" + listener.getLocalPort();
    }

    /** From now on nothing is forwarded either way; new connections are accepted and never answered. */
    void blackhole() {
        blackholed = true;
    }

    private void accept() {
        while (!closed) {
            Socket c;
            try {
                c = listener.accept();
            } catch (IOException e) {
                return;
            }
            sockets.add(c);
            if (blackholed) {
                continue; // held open, never answered
            }
            Socket u = new Socket();
            try {
                u.connect(new InetSocketAddress(targetHost, targetPort));
            } catch (IOException e) {
                quietClose(c);
                continue;
            }
            sockets.add(u);
            pump(c, u);
            pump(u, c);
        }
    }

    /** Copies from {@code a} to {@code b} until the end, or silently stops at a blackhole. */
    private void pump(Socket a, Socket b) {
        Thread t = new Thread(() -> {
            byte[] buf = new byte[65536];
            try {
                InputStream in = a.getInputStream();
                OutputStream out = b.getOutputStream();
                for (int n; (n = in.read(buf)) >= 0; ) {
                    if (blackholed || closed) {
                        return; // stop: both sockets stay open, silent
                    }
                    out.write(buf, 0, n);
                    out.flush();
                }
            } catch (IOException e) {
                // a reset or a close: end both sides as a real path would
            }
            if (!blackholed) {
                quietClose(a);
                quietClose(b);
            }
        }, "proxy-pump");
        t.setDaemon(true);
        t.start();
    }

    private static void quietClose(Socket s) {
        try {
            s.close();
        } catch (IOException e) {
            // closing anyway
        }
    }

    @Override
    public void close() throws IOException {
        closed = true;
        listener.close();
        for (Socket s : sockets) {
            quietClose(s);
        }
    }
}
