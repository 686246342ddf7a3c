// An SMTP relay the tests run (smtp-server) for the courier to send to: it keeps every mail it accepts
// and answers a recipient as the test says (a refusal with its SMTP reply code), so the courier meets
// real SMTP answers. And a wait for what the courier does after a commit.
import type { AddressInfo } from "node:net";
import { SMTPServer } from "smtp-server";

export interface Mail {
  to: string;
  /** The message as received (headers and body, quoted-printable as sent). */
  raw: string;
}

export interface TestSmtp {
  /** SIGIL_SMTP_URL for it. */
  url: string;
  mails: Mail[];
  close(): Promise<void>;
}

/** A refusal of one recipient: the SMTP reply code (4xx defers, 5xx refuses) and its text. */
export type Refusal = { code: number; text: string } | undefined;

export async function startSmtp(refuse: (address: string) => Refusal = () => undefined): Promise<TestSmtp> {
  const mails: Mail[] = [];
  const smtp = new SMTPServer({
    authOptional: true,
    disabledCommands: ["STARTTLS", "AUTH"],
    logger: false,
    onRcptTo(address, _session, callback) {
      const refusal = refuse(address.address);
      callback(refusal ? Object.assign(new Error(refusal.text), { responseCode: refusal.code }) : undefined);
    },
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
  const port = (smtp.server.address() as AddressInfo).port;
  return {
    url: `smtp://127.0.0.1:${port}`,
    mails,
    close: () => new Promise<void>((resolve) => smtp.close(() => resolve())),
  };
}

/** Polls `find` until it gives something (the courier sends after the commit), or fails the test. */
export async function until<T>(find: () => Promise<T | undefined> | T | undefined, what: string, tries = 300): Promise<T> {
  for (let i = 0; i < tries; i++) {
    const found = await find();
    if (found !== undefined) return found;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}
