// What the deployment gives the login operations (logins/sessions.ts, logins/otp-*.ts): session lengths and
// the key session JWTs are signed with; how one-time-password codes are hashed, how long they live,
// where their messages may go and how many may be sent. Declared here, below the operations, because
// the registry's OperationEnvironment names them and the registry knows no operation module.
import type { MessagingConfig } from "../config.js";
import type { SendBudgetSettings } from "./send-budgets.js";
import type { SessionSigner } from "./service-keys.js";

export interface SessionSettings {
  signer: SessionSigner;
  /** Validity when a request names none (the product's 15 minutes). */
  defaultSeconds: number;
  /** The longest validity a request may ask for. */
  maxSeconds: number;
  /** A read-only session's validity (the product's hour). */
  readOnlySeconds: number;
}

export interface OtpSettings extends SendBudgetSettings {
  /** HMAC of "<otp id>:<code>" under the deployment's OTP key. */
  codeHash(message: string): string;
  defaultSeconds: number;
  maxAttempts: number;
  verificationTokenSeconds: number;
  emailAllowedDomains: string[];
  messaging: MessagingConfig;
}
