// Why an Ethereum call reverted, from its revert data, in the shape the product reports it
// (v1RevertChainEntry: errorType `native`, `custom` or `unknown`). Solidity's own errors —
// `Error(string)` from require/revert with a message, `Panic(uint256)` from assert, overflow, division
// by zero… — are decoded by viem's ABIs for them; a contract's custom error only with that contract's
// ABI (its uploaded smart contract interface), which the caller passes when it has one.
import { ContractFunctionRevertedError, decodeErrorResult, type Abi, type Hex } from "viem";

/** One entry of `error.revertChain` / `error.eth.revertChain`, as the API describes it. */
export interface RevertChainEntry {
  address?: string;
  errorType: "unknown" | "native" | "custom";
  displayMessage: string;
  unknown?: { selector?: string; data?: string };
  native?: { nativeType: "error_string" | "panic" | "execution_reverted"; message?: string; panicCode?: string };
  custom?: { errorName: string; paramsJson: string };
}

/** BigInts (uint256 arguments) as decimal strings: JSON has no integers that large. */
const asJson = (value: unknown) => JSON.stringify(value, (_key, v) => (typeof v === "bigint" ? v.toString() : v));

/**
 * Decodes revert data (`0x` and hex, possibly empty) of a call to `address`. `abi` is the called
 * contract's ABI when one is known: only then can a custom error be named.
 */
export function decodeRevert(data: Hex | undefined, address: string | undefined, abi?: Abi): RevertChainEntry {
  const at = address ? { address: address.toLowerCase() } : {};
  if (!data || data === "0x") {
    // revert() with no reason, a failed require without a message, or a node that returned no data.
    return { ...at, errorType: "native", displayMessage: "execution reverted", native: { nativeType: "execution_reverted" } };
  }
  let decoded: ReturnType<typeof decodeErrorResult<Abi>> | undefined;
  try {
    // viem adds Solidity's Error(string) and Panic(uint256) to whatever ABI it is given.
    decoded = decodeErrorResult({ abi: abi ?? [], data });
  } catch {
    decoded = undefined;
  }
  if (decoded?.errorName === "Error") {
    const message = String(decoded.args?.[0] ?? "");
    return { ...at, errorType: "native", displayMessage: message, native: { nativeType: "error_string", message } };
  }
  if (decoded?.errorName === "Panic") {
    const code = BigInt(decoded.args?.[0] as bigint);
    // viem's explanation of the panic code (its table of Solidity's codes), as its revert error gives it.
    const reason = new ContractFunctionRevertedError({ abi: [], data, functionName: "" }).reason;
    return {
      ...at,
      errorType: "native",
      displayMessage: `panic 0x${code.toString(16).padStart(2, "0")}${reason ? `: ${reason}` : ""}`,
      native: { nativeType: "panic", panicCode: code.toString() },
    };
  }
  if (decoded) {
    const inputs = "inputs" in decoded.abiItem ? decoded.abiItem.inputs : [];
    const params = Object.fromEntries((decoded.args ?? []).map((arg, i) => [inputs[i]?.name || String(i), arg]));
    const paramsJson = asJson(params);
    return {
      ...at,
      errorType: "custom",
      displayMessage: `${decoded.errorName}(${(decoded.args ?? []).map((arg) => (typeof arg === "bigint" ? arg.toString() : asJson(arg))).join(", ")})`,
      custom: { errorName: decoded.errorName, paramsJson },
    };
  }
  const selector = data.slice(0, 10);
  return {
    ...at,
    errorType: "unknown",
    displayMessage: `reverted with error ${selector}${abi ? " (not in the contract's ABI)" : " (no ABI known for the contract)"}`,
    unknown: { selector, data },
  };
}

/** The structured error of a send (`error` of get_send_transaction_status): a message, and the revert
 * chain where the cause is a revert — under both `revertChain` and `eth.revertChain`, as the API has both. */
export interface SendError {
  message: string;
  revertChain?: RevertChainEntry[];
  eth?: { revertChain: RevertChainEntry[] };
}

export function revertError(prefix: string, entry: RevertChainEntry): SendError {
  const chain = [entry];
  return { message: `${prefix}: ${entry.displayMessage}`, revertChain: chain, eth: { revertChain: chain } };
}
