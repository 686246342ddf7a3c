// A real SMTP server on loopback (smtp-server) that keeps every message it is handed, for the suites
// whose emails go out through Sigil's courier (one-time passwords, invitations).
import type { AddressInfo } from "node:net";
import { SMTPServer } from "smtp-server";

export interface Mail {
  to: string;
  /** The message as delivered: headers and (often quoted-printable) body. */
  raw: string;
}

export interface SmtpReceiver {
  port: number;
  /** Every message received, one entry per recipient, in arrival order. */
  mails: Mail[];
  close(): Promise<void>;
}

export async function startSmtpReceiver(): Promise<SmtpReceiver> {
  const mails: Mail[] = [];
  const smtp = new SMTPServer({
    authOptional: true,
    disabledCommands: ["STARTTLS", "AUTH"],
    logger: false,
    onData(stream, session, callback) {
      let raw = "";
      stream.on("data", (chunk: Buffer) => (raw += chunk.toString("utf8")));
      stream.on("end", () => {
        for (const rcpt of session.envelope.rcptTo) mails.push({ to: rcpt.address, raw });
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => smtp.listen(0, "127.0.0.1", resolve));
  return {
    port: (smtp.server.address() as AddressInfo).port,
    mails,
    close: () => new Promise<void>((resolve) => smtp.close(() => resolve())),
  };
}
