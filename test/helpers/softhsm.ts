// A SoftHSM2 token of the test's own: a token directory and configuration in a temporary directory
// (SOFTHSM2_CONF points there, for this process and the CLI processes it starts), the token made by
// softhsm2-util, and AES keys generated inside it through pkcs11js, sensitive and not extractable, as
// an operator would make the master key.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { execFileSync } from "node:child_process";
import pkcs11js from "pkcs11js";
import type { TokenConfig } from "../../src/crypto/master-key.js";

/** Where Debian's softhsm2 package puts the module (libsofthsm2 also installs it under the multiarch directory). */
export const SOFTHSM_MODULE = [
  "/usr/lib/softhsm/libsofthsm2.so",
  `/usr/lib/${os.arch() === "arm64" ? "aarch64" : "x86_64"}-linux-gnu/softhsm/libsofthsm2.so`,
].find((file) => fs.existsSync(file));

export interface SoftToken {
  dir: string;
  config: TokenConfig;
  /** The SIGIL_PKCS11_* settings naming the token and its key "sigil-master", with the PIN in the environment. */
  env: Record<string, string>;
  /** Makes another key in the token: AES, sensitive and not extractable unless `options` say otherwise. */
  addKey(label: string, options?: KeyOptions): void;
  remove(): void;
}

export interface KeyOptions {
  /** CKA_EXTRACTABLE true, CKA_SENSITIVE false: a key whose value can be read out of the token. */
  readable?: boolean;
  /** A generic secret (CKK_GENERIC_SECRET), not an AES key. */
  generic?: boolean;
}

export function createSoftToken(tokenLabel = "sigil-test", pin = "4711-hsm-pin"): SoftToken {
  if (!SOFTHSM_MODULE) throw new Error("SoftHSM2 is not installed (Debian package softhsm2; .ci/run installs it)");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-softhsm-"));
  fs.mkdirSync(path.join(dir, "tokens"));
  const conf = path.join(dir, "softhsm2.conf");
  fs.writeFileSync(conf, `directories.tokendir = ${path.join(dir, "tokens")}\nobjectstore.backend = file\nlog.level = ERROR\n`);
  process.env.SOFTHSM2_CONF = conf;
  execFileSync("softhsm2-util", ["--init-token", "--free", "--label", tokenLabel, "--pin", pin, "--so-pin", "so-pin-1"], {
    stdio: "ignore",
  });
  const config: TokenConfig = { module: SOFTHSM_MODULE, tokenLabel, keyLabel: "sigil-master", pin, pinFile: null };
  const addKey = (label: string, options: KeyOptions = {}) => generateKey(config, label, options);
  addKey("sigil-master");
  return {
    dir,
    config,
    env: {
      SIGIL_PKCS11_MODULE: SOFTHSM_MODULE,
      SIGIL_PKCS11_TOKEN_LABEL: tokenLabel,
      SIGIL_PKCS11_KEY_LABEL: "sigil-master",
      SIGIL_PKCS11_PIN: pin,
    },
    addKey,
    remove: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}

function generateKey(config: TokenConfig, label: string, options: KeyOptions): void {
  const p11 = new pkcs11js.PKCS11();
  p11.load(config.module);
  p11.C_Initialize();
  try {
    const slot = p11.C_GetSlotList(true).find((s) => p11.C_GetTokenInfo(s).label.trim() === config.tokenLabel)!;
    const session = p11.C_OpenSession(slot, pkcs11js.CKF_SERIAL_SESSION | pkcs11js.CKF_RW_SESSION);
    p11.C_Login(session, pkcs11js.CKU_USER, config.pin!);
    const mechanism = options.generic ? pkcs11js.CKM_GENERIC_SECRET_KEY_GEN : pkcs11js.CKM_AES_KEY_GEN;
    p11.C_GenerateKey(session, { mechanism, parameter: undefined }, [
      { type: pkcs11js.CKA_CLASS, value: pkcs11js.CKO_SECRET_KEY },
      { type: pkcs11js.CKA_KEY_TYPE, value: options.generic ? pkcs11js.CKK_GENERIC_SECRET : pkcs11js.CKK_AES },
      { type: pkcs11js.CKA_VALUE_LEN, value: 32 },
      { type: pkcs11js.CKA_TOKEN, value: true },
      { type: pkcs11js.CKA_PRIVATE, value: true },
      { type: pkcs11js.CKA_SENSITIVE, value: !options.readable },
      { type: pkcs11js.CKA_EXTRACTABLE, value: options.readable === true },
      ...(options.generic
        ? [{ type: pkcs11js.CKA_SIGN, value: true }]
        : [
            { type: pkcs11js.CKA_ENCRYPT, value: true },
            { type: pkcs11js.CKA_DECRYPT, value: true },
          ]),
      { type: pkcs11js.CKA_LABEL, value: label },
    ]);
    p11.C_Logout(session);
    p11.C_CloseSession(session);
  } finally {
    p11.C_Finalize();
  }
}
