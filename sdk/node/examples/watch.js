'use strict';
// Watches a relay from Node: prints the demo flags for one user, then every
// change as it arrives. Usage (from sdk/node, after `npm install`):
//
//   node examples/watch.js http://127.0.0.1:7070 "$(cat ../../flagstream-data/demo-sdk-key)"
//
// Ctrl-C (or a closed stdin) stops it.

const { Client, Context } = require('..');

const [endpoints = 'http://127.0.0.1:7070', sdkKey = process.env.FLAGSTREAM_SDK_KEY] = process.argv.slice(2);
if (!sdkKey) {
  console.error('usage: node examples/watch.js <endpoint[,endpoint...]> <sdk-key>');
  process.exit(2);
}

const client = new Client({ endpoints: endpoints.split(','), sdkKey });
// Prebuilt once: evaluating with it converts nothing.
const user = new Context({ key: 'user-42', country: 'US', plan: 'enterprise' });

function show(keys) {
  for (const key of keys) {
    const d = client.jsonDetail(key, user, null);
    console.log(`  ${key} = ${JSON.stringify(d.value)} (${d.reason}${d.ruleId ? ` ${d.ruleId}` : ''})`);
  }
}

client.on('change', (e) => {
  console.log(`revision ${e.revision}: ${e.flags.length} flag(s) changed`);
  show(e.flags);
});

client.waitReady(5000).then((ready) => {
  const s = client.status();
  console.log(ready ? `serving revision ${s.revision} from the ${s.source}` : `no flags yet (${s.state})`);
  // The client never holds the process open: keep it alive until Ctrl-C.
  const keepAlive = setInterval(() => {}, 1 << 30);
  const stop = () => {
    clearInterval(keepAlive);
    // The process exits once the final usage summary is sent (or 2 s passed).
    client.close();
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
});
