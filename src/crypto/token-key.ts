// The master key in a PKCS#11 token (an HSM, or SoftHSM2): an AES-256 key that never leaves it.
// Sigil asks the token for two things only: to wrap a data key (AES-GCM encrypt, at the first start and
// at a rotation) and to unwrap it (AES-GCM decrypt, at each start). The data key then seals and opens
// secrets in process memory like a file key does (docs/hsm.md says why not one token call per secret).
// Every call is made through pkcs11js (PeculiarVentures' binding of the PKCS#11 2.40 interface); each
// failure is said in Sigil's terms, naming the setting to change, never the PIN.
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import pkcs11js from "pkcs11js";
import { describeToken, type TokenConfig } from "./master-key.js";

/** A token that cannot be used as configured: the message names the setting to change. */
export class TokenError extends Error {
  override name = "TokenError";
}

/** How a wrapped data key is written: the format, then base64url of IV ‖ ciphertext ‖ tag. */
const WRAP_FORMAT = "p11-aes-gcm-v1";
const IV_BYTES = 12;
const TAG_BITS = 128;

/**
 * The PIN, from SIGIL_PKCS11_PIN or the file SIGIL_PKCS11_PIN_FILE names. A PIN file others may read
 * is refused, as ssh refuses such a private key: the PIN would be as good as published to every account on the host.
 */
export function readPin(config: TokenConfig): string {
  if (config.pin !== null) return config.pin;
  const file = config.pinFile!;
  let stat: fs.Stats;
  try {
    stat = fs.statSync(file);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new TokenError(`SIGIL_PKCS11_PIN_FILE names ${file}, which ${code === "ENOENT" ? "does not exist" : `cannot be read (${code})`}`);
  }
  if (!stat.isFile()) throw new TokenError(`SIGIL_PKCS11_PIN_FILE names ${file}, which is not a file`);
  if ((stat.mode & 0o077) !== 0) {
    throw new TokenError(
      `SIGIL_PKCS11_PIN_FILE ${file} may be read or written by others than its owner (mode ${(stat.mode & 0o777).toString(8)}): ` +
        `make it readable by its owner only (chmod 600 ${file})`,
    );
  }
  // One line: a trailing newline (what `echo` writes) is not part of the PIN.
  const pin = fs.readFileSync(file, "utf8").replace(/\r?\n$/, "");
  if (pin === "") throw new TokenError(`SIGIL_PKCS11_PIN_FILE ${file} is empty: it must hold the token's user PIN`);
  return pin;
}

const pinSetting = (config: TokenConfig) => (config.pin !== null ? "SIGIL_PKCS11_PIN" : `SIGIL_PKCS11_PIN_FILE (${config.pinFile})`);

/** One loaded library per path: loading the same module twice in a process shares its state anyway. */
const modules = new Map<string, pkcs11js.PKCS11>();

function loadModule(path: string): pkcs11js.PKCS11 {
  const known = modules.get(path);
  if (known) return known;
  if (!fs.existsSync(path)) throw new TokenError(`SIGIL_PKCS11_MODULE names ${path}, which does not exist`);
  const library = new pkcs11js.PKCS11();
  try {
    library.load(path);
  } catch (error) {
    const why = /C_GetFunctionList/.test((error as Error).message)
      ? "it has no C_GetFunctionList"
      : /invalid ELF header|file too short|wrong ELF class/.test((error as Error).message)
        ? "it is not a shared library for this machine"
        : "it cannot be loaded";
    throw new TokenError(`SIGIL_PKCS11_MODULE names ${path}, which is not a PKCS#11 module: ${why}`);
  }
  modules.set(path, library);
  return library;
}

/** The PKCS#11 return value's name (CKR_PIN_INCORRECT), which operators look up in their HSM's manual. */
const returnValue = (error: unknown) =>
  error instanceof pkcs11js.Pkcs11Error ? error.message : error instanceof Error ? "an error of the module" : String(error);

/**
 * A logged-in session on the token with the key found. Used synchronously and closed at once (see
 * withToken): nothing of the token is held while the server runs.
 */
export class TokenKey {
  private constructor(
    private readonly library: pkcs11js.PKCS11,
    private readonly session: Buffer,
    private readonly key: Buffer,
    private readonly finalize: boolean,
    readonly config: TokenConfig,
    /** What an operator should know about the key (it is extractable, …), for the log. */
    readonly warnings: string[],
  ) {}

  static open(config: TokenConfig): TokenKey {
    const pin = readPin(config);
    const library = loadModule(config.module);
    let finalize = true;
    try {
      library.C_Initialize();
    } catch (error) {
      // Another user of the module in this process (a test's setup) initialized it: it finalizes it too.
      if (!(error instanceof pkcs11js.Pkcs11Error && error.code === pkcs11js.CKR_CRYPTOKI_ALREADY_INITIALIZED))
        throw new TokenError(`SIGIL_PKCS11_MODULE ${config.module} did not initialize (${returnValue(error)})`);
      finalize = false;
    }
    let session: Buffer | undefined;
    try {
      const slots = library.C_GetSlotList(true);
      const labels = slots.map((slot) => library.C_GetTokenInfo(slot).label.trim());
      const matching = slots.filter((_, i) => labels[i] === config.tokenLabel);
      if (matching.length === 0) {
        const present = labels.length > 0 ? `its tokens are ${labels.map((l) => JSON.stringify(l)).join(", ")}` : "it has no token";
        throw new TokenError(`SIGIL_PKCS11_TOKEN_LABEL: there is no token labelled "${config.tokenLabel}" in ${config.module}; ${present}`);
      }
      if (matching.length > 1)
        throw new TokenError(
          `SIGIL_PKCS11_TOKEN_LABEL: ${matching.length} tokens in ${config.module} are labelled "${config.tokenLabel}"; give each its own label`,
        );
      session = library.C_OpenSession(matching[0]!, pkcs11js.CKF_SERIAL_SESSION);
      try {
        library.C_Login(session, pkcs11js.CKU_USER, pin);
      } catch (error) {
        const code = error instanceof pkcs11js.Pkcs11Error ? error.code : -1;
        if (code !== pkcs11js.CKR_USER_ALREADY_LOGGED_IN) {
          const why =
            code === pkcs11js.CKR_PIN_INCORRECT
              ? "refused the PIN (CKR_PIN_INCORRECT): it is not the token's user PIN"
              : code === pkcs11js.CKR_PIN_LOCKED
                ? "has locked its user PIN after too many wrong tries (CKR_PIN_LOCKED): its security officer must unlock it"
                : `refused the login (${returnValue(error)})`;
          throw new TokenError(`${pinSetting(config)}: token "${config.tokenLabel}" ${why}`);
        }
      }
      const key = findKey(library, session, config);
      const warnings: string[] = [];
      const [extractable, sensitive] = library.C_GetAttributeValue(session, key, [
        { type: pkcs11js.CKA_EXTRACTABLE },
        { type: pkcs11js.CKA_SENSITIVE },
      ]);
      if (isTrue(extractable?.value)) warnings.push("the key is extractable (CKA_EXTRACTABLE): it can be exported from the token");
      if (!isTrue(sensitive?.value)) warnings.push("the key is not sensitive (CKA_SENSITIVE false): its value can be read from the token");
      return new TokenKey(library, session, key, finalize, config, warnings);
    } catch (error) {
      if (session) closeQuietly(() => library.C_CloseSession(session!));
      if (finalize) closeQuietly(() => library.C_Finalize());
      throw error;
    }
  }

  private mechanism(iv: Buffer, aad: Buffer): pkcs11js.Mechanism {
    return {
      mechanism: pkcs11js.CKM_AES_GCM,
      parameter: { type: pkcs11js.CK_PARAMS_AES_GCM, iv, aad, ivBits: IV_BYTES * 8, tagBits: TAG_BITS } as pkcs11js.AesGCM,
    };
  }

  /** Encrypts a data key under the token's key, bound to `aad`. */
  wrap(dataKey: Buffer, aad: Buffer): string {
    const iv = crypto.randomBytes(IV_BYTES);
    try {
      this.library.C_EncryptInit(this.session, this.mechanism(iv, aad), this.key);
      const body = this.library.C_Encrypt(this.session, dataKey, Buffer.alloc(dataKey.length + TAG_BITS / 8));
      return `${WRAP_FORMAT}.${Buffer.concat([iv, body]).toString("base64url")}`;
    } catch (error) {
      throw new TokenError(
        `${describeToken(this.config)} did not encrypt with AES-GCM (${returnValue(error)}): SIGIL_PKCS11_KEY_LABEL must name an AES key the token lets encrypt`,
      );
    }
  }

  /** Decrypts a data key `wrap` made; throws when it was wrapped by another key or for other `aad`. */
  unwrap(wrapped: string, aad: Buffer): Buffer {
    const [format, payload] = wrapped.split(".");
    const bytes = Buffer.from(payload ?? "", "base64url");
    if (format !== WRAP_FORMAT || bytes.length <= IV_BYTES + TAG_BITS / 8)
      throw new TokenError("the wrapped data key is not in Sigil's format");
    try {
      this.library.C_DecryptInit(this.session, this.mechanism(bytes.subarray(0, IV_BYTES), aad), this.key);
      return this.library.C_Decrypt(this.session, bytes.subarray(IV_BYTES), Buffer.alloc(bytes.length));
    } catch {
      throw new TokenError(
        `the database's data key does not open under ${describeToken(this.config)}: it was wrapped by another key. ` +
          "SIGIL_PKCS11_TOKEN_LABEL and SIGIL_PKCS11_KEY_LABEL must name the key it was wrapped by",
      );
    }
  }

  close(): void {
    closeQuietly(() => this.library.C_Logout(this.session));
    closeQuietly(() => this.library.C_CloseSession(this.session));
    if (this.finalize) closeQuietly(() => this.library.C_Finalize());
  }
}

/**
 * Opens the token, runs `work` with its key and closes it again, synchronously: no other use of the
 * module in this process can come between (PKCS#11 initialization is per process), and no session is
 * left open for the server's life (an HSM's sessions are few and shared by every process using it).
 */
export function withToken<T>(config: TokenConfig, work: (token: TokenKey) => T): T {
  const token = TokenKey.open(config);
  try {
    return work(token);
  } finally {
    token.close();
  }
}

function findKey(library: pkcs11js.PKCS11, session: Buffer, config: TokenConfig): Buffer {
  library.C_FindObjectsInit(session, [
    { type: pkcs11js.CKA_CLASS, value: pkcs11js.CKO_SECRET_KEY },
    { type: pkcs11js.CKA_LABEL, value: config.keyLabel },
  ]);
  let found: Buffer[];
  try {
    found = library.C_FindObjects(session, 2);
  } finally {
    library.C_FindObjectsFinal(session);
  }
  if (found.length === 0)
    throw new TokenError(
      `SIGIL_PKCS11_KEY_LABEL: token "${config.tokenLabel}" holds no secret key labelled "${config.keyLabel}" (docs/hsm.md says how to make one)`,
    );
  if (found.length > 1)
    throw new TokenError(`SIGIL_PKCS11_KEY_LABEL: token "${config.tokenLabel}" holds several secret keys labelled "${config.keyLabel}"`);
  const key = found[0]!;
  const [type, encrypt, decrypt] = library.C_GetAttributeValue(session, key, [
    { type: pkcs11js.CKA_KEY_TYPE },
    { type: pkcs11js.CKA_ENCRYPT },
    { type: pkcs11js.CKA_DECRYPT },
  ]);
  // A CK_ULONG in the machine's byte order; key types are small numbers.
  const raw = type?.value;
  const keyType =
    !Buffer.isBuffer(raw) || raw.length < 4 ? -1 : os.endianness() === "LE" ? raw.readUInt32LE(0) : raw.readUInt32BE(raw.length - 4);
  if (keyType !== pkcs11js.CKK_AES || !isTrue(encrypt?.value) || !isTrue(decrypt?.value))
    throw new TokenError(
      `SIGIL_PKCS11_KEY_LABEL: the key labelled "${config.keyLabel}" in token "${config.tokenLabel}" must be an AES key allowed to encrypt and decrypt (CKK_AES, CKA_ENCRYPT, CKA_DECRYPT)`,
    );
  return key;
}

/** A CK_BBOOL as pkcs11js returns it: a one-byte buffer. */
const isTrue = (value: unknown) => (Buffer.isBuffer(value) ? value[0] === 1 : value === true);

function closeQuietly(step: () => void) {
  try {
    step();
  } catch {
    // Closing what is already closed (a token removed, a session the module dropped): nothing to do.
  }
}
