// A local Ethereum node for the SDK examples (docs/sdk-examples.md): Hardhat Network with Sepolia's
// chain id, which the examples that name `sepolia` sign for and Sigil's `caip2` accepts.
module.exports = { networks: { hardhat: { chainId: 11155111 } } };
