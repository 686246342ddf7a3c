// Answers from other hosts (chain nodes, OAuth 2.0 providers) are read no further than the caller
// expects them to be long: a host that streams without end would otherwise hold the memory it fills.

/** A response's body as text, read up to `maxBytes`; undefined (the rest cancelled) when it is longer. */
export async function bodyUpTo(response: Response, maxBytes: number): Promise<string | undefined> {
  const reader = response.body?.getReader();
  if (!reader) return "";
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel();
      return undefined;
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString("utf8");
}
