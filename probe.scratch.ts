import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs"; import os from "node:os"; import path from "node:path"; import http from "node:http";
import pg from "pg";
import { apiKey, Client, load } from "./bench/generator.js";
import { signupParameters } from "./bench/ceiling.js";
import { generateP256KeyPair } from "./src/crypto/keys.js";
const backend = process.argv[2] ?? "sqlite";
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "probe-"));
const env: NodeJS.ProcessEnv = { ...process.env, SIGIL_METRICS: "on", SIGIL_MAX_CONNECTIONS_PER_ADDRESS: "0" };
for (const l of ["KEY","SUB_ORGANIZATION","ORGANIZATION"]) for (const k of ["ACTIVITIES","QUERIES"]) env[`SIGIL_RATE_LIMIT_${l}_${k}`]="1000000/1000000";
delete env.SIGIL_DATABASE_URL;
let dbname = "";
if (backend === "postgres") { const a = new pg.Client({connectionString:"postgres://postgres@127.0.0.1:5432/sigil_signup"}); await a.connect(); dbname=`probe_${Date.now()}`; await a.query(`create database ${dbname}`); await a.end(); env.SIGIL_DATABASE_URL=`postgres://postgres@127.0.0.1:5432/${dbname}`; }
const key = apiKey();
const boot = spawnSync(process.execPath, ["bin/sigil.js","bootstrap","--create","--data-dir",dataDir,"--org-name","p","--user-name","p","--api-public-key",key.publicKey],{env,encoding:"utf8"});
const { organizationId } = JSON.parse(boot.stdout);
const port = 30000 + Math.floor(Math.random()*5000);
const child = spawn(process.execPath, ["bin/sigil.js","serve","--port",String(port),"--data-dir",dataDir],{env,stdio:"ignore"});
await new Promise(r=>setTimeout(r,2500));
const client = new Client(`http://127.0.0.1:${port}`, key, organizationId, 64);
const scenario = { fresh: true, make: () => client.submitBody("create_sub_organization","ACTIVITY_TYPE_CREATE_SUB_ORGANIZATION_V7",(n)=>signupParameters(n, generateP256KeyPair().publicKey)) };
const scrape = () => new Promise<string>((res)=>http.get(`http://127.0.0.1:${port}/metrics`,(r)=>{let b="";r.on("data",(c)=>b+=c);r.on("end",()=>res(b));}));
await load(client, 16, scenario, 1, 200);
const before = await scrape();
const c = Number(process.argv[3] ?? 16);
const r = await load(client, c, scenario, 5, 2000);
const after = await scrape();
const val = (t: string, re: RegExp) => { let s=0; for (const line of t.split("\n")) if (re.test(line)) s+=Number(line.split(" ").pop()); return s; };
console.log(backend, "c", c, "rps", r.requestsPerSecond, "p50", r.p50Ms, "p99", r.p99Ms);
const n = r.requests;
console.log("statements/signup", ((val(after,/^sigil_database_statements_total/) - val(before,/^sigil_database_statements_total/))/n).toFixed(1));
for (const step of ["authentication","organization_lock","decision","execution","commit"]) {
  const sum = val(after,new RegExp(`step="${step}"\\}`)) ; 
  const re = new RegExp(`^sigil_activity_step_duration_seconds_sum\\{.*step="${step}"`); const re2 = new RegExp(`^sigil_activity_step_duration_seconds_count\\{.*step="${step}"`);
  const ds = val(after,re)-val(before,re), dc = val(after,re2)-val(before,re2);
  console.log(step, "mean ms", dc? (ds/dc*1000).toFixed(2):"-", "count", dc);
}
client.close(); child.kill("SIGTERM"); await new Promise(r=>setTimeout(r,500));
if (dbname) { const a = new pg.Client({connectionString:"postgres://postgres@127.0.0.1:5432/sigil_signup"}); await a.connect(); await a.query(`drop database ${dbname} with (force)`); await a.end(); }
fs.rmSync(dataDir,{recursive:true,force:true});
