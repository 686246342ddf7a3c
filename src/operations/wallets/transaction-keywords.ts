// Condition keywords for parsed transactions and typed data, with the shapes the product's policy
// docs give them (features/policies/language.mdx). Declaring them here lets policies written for
// the product be stored and checked today; the signing operations supply their values through
// their `policyContext` (an activity without one reads them as "not available": OUTCOME_ERROR).
// Fields typed T.ethereumAddress are Ethereum addresses: comparisons with them ignore letter case.
import { defineKeyword } from "../../policy/keywords.js";
import { T } from "../../policy/types.js";

const ADDRESS_TABLE_LOOKUP = T.struct("AddressTableLookup", {
  address_table_key: T.string,
  writable_indexes: T.list(T.int),
  readonly_indexes: T.list(T.int),
});

defineKeyword({
  path: "eth.tx",
  fields: ["condition"],
  description: "The Ethereum transaction being signed, parsed.",
  type: T.struct("EthereumTransaction", {
    from: T.ethereumAddress,
    to: T.ethereumAddress,
    data: T.string,
    value: T.int,
    gas: T.int,
    gas_price: T.int,
    chain_id: T.int,
    nonce: T.int,
    max_fee_per_gas: T.int,
    max_priority_fee_per_gas: T.int,
    max_fee_per_blob_gas: T.int,
    type: T.string,
    function_name: T.string,
    function_signature: T.string,
    // Decoded arguments are whatever the contract's ABI says: checked when the policy runs (an
    // `address` argument is marked as one, policy/types.ts EthereumAddress).
    contract_call_args: T.map(T.dynamic),
  }),
});

defineKeyword({
  path: "eth.eip_712",
  fields: ["condition"],
  description: "EIP-712 typed data being signed.",
  type: T.struct("Eip712TypedData", {
    primary_type: T.string,
    domain: T.struct("Eip712Domain", { name: T.string, version: T.string, chain_id: T.uint, verifying_contract: T.ethereumAddress }),
    message: T.map(T.dynamic),
  }),
});

defineKeyword({
  path: "eth.eip_7702_authorization",
  fields: ["condition"],
  description: "An EIP-7702 authorization being signed.",
  type: T.struct("Eip7702Authorization", { address: T.ethereumAddress, chain_id: T.int, nonce: T.int }),
});

defineKeyword({
  path: "solana.tx",
  fields: ["condition"],
  description: "The Solana transaction being signed, parsed.",
  type: T.struct("SolanaTransaction", {
    account_keys: T.list(T.string),
    program_keys: T.list(T.string),
    instructions: T.list(
      T.struct("Instruction", {
        program_key: T.string,
        accounts: T.list(T.struct("Account", { account_key: T.string, signer: T.bool, writable: T.bool })),
        instruction_data_hex: T.string,
        address_table_lookups: T.list(ADDRESS_TABLE_LOOKUP),
        parsed_instruction_data: T.struct("SolanaParsedInstructionData", {
          instruction_name: T.string,
          discriminator: T.string,
          // The product's language reference says named_account, its smart-contract page
          // named_accounts: both are served, with the same map.
          named_account: T.map(T.string),
          named_accounts: T.map(T.string),
          program_call_args: T.map(T.dynamic),
        }),
      }),
    ),
    transfers: T.list(T.struct("Transfer", { from: T.string, to: T.string, amount: T.int })),
    recent_blockhash: T.string,
    spl_transfers: T.list(
      T.struct("SPLTransfer", {
        from: T.string,
        to: T.string,
        amount: T.int,
        owner: T.string,
        signers: T.list(T.string),
        token_mint: T.string,
      }),
    ),
    address_table_lookups: T.list(ADDRESS_TABLE_LOOKUP),
  }),
});

defineKeyword({
  path: "bitcoin.tx",
  fields: ["condition"],
  description: "The Bitcoin transaction being signed, read from its PSBT; amounts in satoshis.",
  type: T.struct("BitcoinTransaction", {
    version: T.string,
    inputs: T.list(T.struct("BitcoinTxInput", { tx_id: T.string, vout: T.int, sequence: T.int })),
    outputs: T.list(T.struct("BitcoinTxOutput", { value: T.int, script_pubkey: T.string, address: T.string, address_type: T.string })),
    locktime: T.struct("BitcoinTxLocktime", { amount: T.int, type: T.string }),
    fee: T.int,
  }),
});

const TRON_PERMISSION = T.struct("TronPermission", {
  type: T.string,
  id: T.int,
  permission_name: T.string,
  threshold: T.int,
  parent_id: T.int,
  operations: T.string,
  keys: T.list(T.struct("TronKey", { address: T.string, weight: T.int })),
});

defineKeyword({
  path: "tron.tx",
  fields: ["condition"],
  description: "The Tron transaction being signed, read from its raw_data; amounts in sun, byte fields in hex.",
  type: T.struct("TronTransaction", {
    ref_block_bytes: T.string,
    ref_block_hash: T.string,
    expiration: T.int,
    timestamp: T.int,
    data: T.string,
    fee_limit: T.int,
    contract: T.list(
      T.struct("TronContract", {
        type: T.string,
        permission_id: T.int,
        owner_address: T.string,
        to_address: T.string,
        amount: T.int,
        contract_address: T.string,
        call_value: T.int,
        data: T.string,
        call_token_value: T.int,
        token_id: T.int,
        resource: T.string,
        balance: T.int,
        receiver_address: T.string,
        lock: T.bool,
        lock_period: T.int,
        frozen_balance: T.int,
        unfreeze_balance: T.int,
        owner: TRON_PERMISSION,
        witness: TRON_PERMISSION,
        actives: T.list(TRON_PERMISSION),
      }),
    ),
  }),
});

defineKeyword({
  path: "tempo.tx",
  fields: ["condition"],
  description: "The Tempo transaction (type 0x76) being signed, parsed.",
  type: T.struct("TempoTransaction", {
    chain_id: T.int,
    from: T.ethereumAddress,
    nonce: T.int,
    gas_limit: T.int,
    max_fee_per_gas: T.int,
    max_priority_fee_per_gas: T.int,
    fee_token: T.ethereumAddress,
    valid_before: T.int,
    valid_after: T.int,
    calls: T.list(T.struct("TempoCall", { to: T.ethereumAddress, input: T.string, function_signature: T.string })),
  }),
});
