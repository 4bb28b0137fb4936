// What the size checks share (package-check.mjs, build-example.mjs, snippet-modules.mjs): the
// README's web snippet, and the chunks a device without a shuffler loads over Connect — every chunk
// reachable from the entry, static or dynamic, but the two loaded on demand only: shuffle mode's
// sealing (the chunk holding core/hpke, the HPKE code) and the gRPC-Web framing (web/grpcWeb,
// loaded only by a FetchTransport with protocol "grpc-web").

/** The README's ts block that imports @uldp/device/web with IndexedDbStore. */
export function readmeSnippet(readme) {
  const snippet = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1])
    .find((b) => b.includes("@uldp/device/web") && b.includes("IndexedDbStore"));
  if (!snippet) throw new Error("README.md has no ts block importing @uldp/device/web with IndexedDbStore");
  return snippet;
}

/** What a page loads only on demand: shuffle mode's sealing, the gRPC-Web framing. */
export const ON_DEMAND = /core\/hpke\.[jt]s$|web\/grpcWeb\.[jt]s$/;

/** The output files of an esbuild metafile reachable from its entry, the chunks holding an
 * ON_DEMAND module left out. */
export function withoutOnDemand(outputs, onDemand = ON_DEMAND) {
  const isSealing = (o) => Object.keys(outputs[o].inputs).some((i) => onDemand.test(i));
  const start = new Set();
  const visit = (o) => {
    if (start.has(o) || isSealing(o)) return;
    start.add(o);
    for (const i of outputs[o].imports) if (i.kind === "import-statement" || i.kind === "dynamic-import") visit(i.path);
  };
  visit(Object.keys(outputs).find((o) => outputs[o].entryPoint));
  return start;
}
