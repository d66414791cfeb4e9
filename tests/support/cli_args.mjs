// Command-line arguments of the Node.js test scripts (tests/deploy,
// tests/http): `--name value` or `--name=value` pairs into an object.
export function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (!a.startsWith("--")) throw new Error(`unexpected argument '${a}'`);
    const eq = a.indexOf("=");
    if (eq > 0) out[a.slice(2, eq)] = a.slice(eq + 1);
    else out[a.slice(2)] = argv[++i];
  }
  return out;
}
