#!/usr/bin/env node
// pg-boss under the job-queue benchmark's protocol: the settings of the harness's own pg-boss
// adapter (a partitioned queue, polling every 0.5 s, fetches of a batch sized from the rate,
// work slept per job), bulk inserts for the producer. Run by bench/pressure.py with NODE_PATH
// naming an `npm install pg-boss` folder.
"use strict";
const fs = require("node:fs");
const { PgBoss } = require("pg-boss");

const env = (k, d) => (process.env[k] !== undefined && process.env[k] !== "" ? process.env[k] : d);
const envInt = (k, d) => Number.parseInt(env(k, String(d)), 10);
const QUEUE = "bench";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const mono = () => Number(process.hrtime.bigint()) / 1e6;
const iso = () => new Date().toISOString();
const emit = (r) => process.stdout.write(JSON.stringify({ instance_id: 0, ...r }) + "\n");

function rateNow(base) {
  const file = env("PRODUCER_RATE_CONTROL_FILE", "");
  if (!file) return base;
  try {
    const v = Number.parseFloat(fs.readFileSync(file, "utf8").trim());
    return Number.isFinite(v) ? v : base;
  } catch {
    return base;
  }
}

async function main() {
  const url = env("DATABASE_URL");
  const mode = env("PRODUCER_MODE", "fixed");
  const rate = envInt("PRODUCER_RATE", 800);
  const targetDepth = envInt("TARGET_DEPTH", 1000);
  const workers = envInt("WORKER_COUNT", 8);
  const workMs = envInt("JOB_WORK_MS", 1);
  const batchMs = envInt("PRODUCER_BATCH_MS", 10);
  const batchMax = envInt("PRODUCER_BATCH_MAX", 128);
  const every = envInt("SAMPLE_EVERY_S", 5);
  const fetchBatch = envInt(
    "SUBSCRIBER_BATCH_SIZE",
    Math.max(1, Math.min(64, Math.ceil((rate * 1.25) / Math.max(workers * 2, 1))))
  );
  const pad = "x".repeat(Math.max(0, envInt("JOB_PAYLOAD_BYTES", 256) - 64));

  const boss = new PgBoss({ connectionString: url, noSupervisor: true, noScheduling: true });
  boss.on("error", (e) => console.error("[pgboss] error", e.message || e));
  await boss.start();
  if (!(await boss.getQueue(QUEUE))) await boss.createQueue(QUEUE, { partition: true });
  const version = JSON.parse(fs.readFileSync(require.resolve("pg-boss/package.json"), "utf8")).version;
  emit({ kind: "descriptor", system: "pgboss", event_tables: ["pgboss.job"], extensions: [],
         version, schema_version: "current", db_name: url.split("/").pop().split("?")[0],
         started_at: iso() });

  let enqueued = 0, completed = 0, depth = 0, target = rate, stopping = false;
  const lat = [];
  process.on("SIGTERM", () => { stopping = true; });
  process.on("SIGINT", () => { stopping = true; });

  await boss.work(QUEUE, { pollingIntervalSeconds: 0.5, localConcurrency: workers, batchSize: fetchBatch },
    async (jobs) => {
      const now = Date.now(), at = mono();
      for (const j of jobs) lat.push([at, now - j.data.t]);
      if (workMs > 0) await sleep(workMs * jobs.length);
      completed += jobs.length;
    });

  (async () => {
    while (!stopping) {
      try { depth = (await boss.getQueueStats(QUEUE)).queuedCount; } catch (e) { /* a kill: retry */ }
      await sleep(500);
    }
  })();

  (async () => {
    await sleep(every * 1000 - (Date.now() % (every * 1000)));
    let lastE = enqueued, lastC = completed, last = mono();
    while (!stopping) {
      await sleep(every * 1000 - (Date.now() % (every * 1000)));
      const now = mono(), span = Math.max(0.001, (now - last) / 1000);
      while (lat.length && lat[0][0] < now - 30000) lat.shift();
      const v = lat.map((x) => x[1]).sort((a, b) => a - b);
      const q = (p) => (v.length ? v[Math.min(v.length - 1, Math.round(p * (v.length - 1)))] : 0);
      const t = iso();
      for (const [metric, value, w] of [
        ["claim_p50_ms", q(0.5), 30], ["claim_p95_ms", q(0.95), 30], ["claim_p99_ms", q(0.99), 30],
        ["enqueue_rate", (enqueued - lastE) / span, every], ["completion_rate", (completed - lastC) / span, every],
        ["queue_depth", depth, 0], ["producer_target_rate", target, 0],
      ]) emit({ t, system: "pgboss", kind: "adapter", subject_kind: "adapter", subject: "", metric, value, window_s: w });
      lastE = enqueued; lastC = completed; last = now;
    }
  })();

  let credit = 0, last = mono(), seq = 0;
  while (!stopping) {
    await sleep(Math.max(0, batchMs - (mono() - last)));
    let n;
    if (mode === "depth-target") {
      last = mono(); target = 0;
      n = Math.max(0, Math.min(batchMax, targetDepth - depth));
    } else {
      const now = mono();
      target = rateNow(rate);
      credit += (target * (now - last)) / 1000;
      last = now;
      n = Math.min(batchMax, Math.floor(credit));
      credit -= n;
    }
    if (n <= 0) continue;
    const t = Date.now(), jobs = [];
    for (let i = 0; i < n; i += 1) jobs.push({ data: { seq: seq + i, t, pad } });
    try {
      await boss.insert(QUEUE, jobs);
      seq += n; enqueued += n;
    } catch (e) {
      console.error("[pgboss] insert", e.message || e);
      await sleep(50);
    }
  }
  await boss.stop({ graceful: true, timeout: 4000 });
  process.exit(0);
}

main().catch((e) => { console.error(e); process.exit(1); });
