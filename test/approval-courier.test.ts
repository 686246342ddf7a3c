// An activity that queues a message and runs only once it is approved (a one-time password a policy
// makes wait for a second person): the approval's commit tells the courier, as a submit's does, so the
// code goes out now and not at the courier's next look. The courier here looks once an hour.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { startHarness, newKeyPair, type Harness } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";

const texts: Array<{ to: string; body: string }> = [];
let provider: http.Server;
let h: Harness;

beforeAll(async () => {
  provider = http.createServer((request, response) => {
    let body = "";
    request.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")));
    request.on("end", () => {
      texts.push(JSON.parse(body) as { to: string; body: string });
      response.writeHead(202).end();
    });
  });
  await new Promise<void>((resolve) => provider.listen(0, "127.0.0.1", resolve));
  const port = (provider.address() as AddressInfo).port;
  h = await startHarness({ SIGIL_SMS_URL: `http://127.0.0.1:${port}/sms`, SIGIL_MESSAGE_POLL_MS: "3600000" });
});
afterAll(async () => {
  await h.close();
  await new Promise<void>((resolve) => provider.close(() => resolve()));
});

describe("an approval that completes a message-sending activity", () => {
  it("tells the courier, so the code is sent without waiting for the courier's next look", async () => {
    const org = await h.organization("Approvals");
    const root = h.sdk(org, org.key, fastPoller);
    await root.setOrganizationFeature({ name: "FEATURE_NAME_SMS_AUTH", value: "" });
    const key = newKeyPair();
    const { userIds } = await root.createUsers({
      users: [
        {
          userName: "support",
          apiKeys: [{ apiKeyName: "support", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
          userTags: [],
        },
      ],
    });
    // Support may send codes, once the root user agrees.
    await root.createPolicy({
      policyName: "support sends codes with the root's approval",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(user, user.id == '${org.userId}')`,
      condition: "activity.resource == 'OTP'",
      notes: "",
    });
    const support = h.sdk(org, key, fastPoller);
    const phone = "+15553000001";
    const pending = await support.initOtp({ otpType: "OTP_TYPE_SMS", contact: phone, appName: "Demo" });
    expect(pending.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    expect(userIds).toHaveLength(1);

    const approved = await root.approveActivity({ fingerprint: pending.activity.fingerprint });
    expect(approved.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    for (let i = 0; i < 400 && !texts.some((t) => t.to === phone); i++) await new Promise((r) => setTimeout(r, 25));
    expect(texts.map((t) => t.to)).toContain(phone);
  });
});
