// Serves the demo page (index.html and app.js bundled with esbuild) on
// its own origin, as a web app's server would.
//
//   node page/serve.mjs [--port 8000]
//   then open http://localhost:8000/?relay=http://127.0.0.1:8081&key=fs_client_...
//
// The relay must list the page's origin: flagctl env cors demo --allow http://localhost:8000
import { readFileSync } from "node:fs";
import http from "node:http";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = new URL(".", import.meta.url);

/** The page's files: the HTML and the bundled script. */
export async function build() {
  const out = await esbuild.build({
    entryPoints: [fileURLToPath(new URL("app.js", here))],
    bundle: true,
    format: "esm",
    target: "es2022",
    write: false,
    logLevel: "silent",
  });
  return { "/": readFileSync(new URL("index.html", here)), "/app.js": out.outputFiles[0].contents };
}

/** Serves `files` on 127.0.0.1:`port` (0: any); resolves to the server and its origin. */
export function serve(files, port = 0, host = "127.0.0.1") {
  const server = http.createServer((req, res) => {
    const path = new URL(req.url, "http://x").pathname;
    const body = files[path];
    if (!body) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": path === "/" ? "text/html" : "text/javascript" }).end(body);
  });
  return new Promise((resolve) =>
    server.listen(port, host, () => resolve({ server, origin: `http://${host}:${server.address().port}` })),
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf("--port");
  const port = i > 0 ? Number(process.argv[i + 1]) : 8000;
  const { origin } = await serve(await build(), port, "localhost");
  console.log(`serving the demo page on ${origin}/?relay=<OFREP base URL>&key=<client-side key>`);
}
