// Requests from a chosen loopback source address (127.0.0.1, 127.0.0.2, ::1 …), so tests of address
// rules (IP allowlists) run the allowed and the refused path over real TCP connections.
import { Agent, getGlobalDispatcher, setGlobalDispatcher } from "undici";

/** Runs `work` with every fetch of this process leaving from `localAddress`. */
export async function fromAddress<T>(localAddress: string, work: () => Promise<T>): Promise<T> {
  const previous = getGlobalDispatcher();
  // undici 5 takes the source address as the Agent's own option (its `connect.localAddress` is overridden).
  const agent = new Agent({ localAddress });
  setGlobalDispatcher(agent);
  try {
    return await work();
  } finally {
    setGlobalDispatcher(previous);
    await agent.close();
  }
}
