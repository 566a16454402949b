// Place an order and enqueue its confirmation email in ONE transaction,
// with plain SQL: the job is created (by `leasehold relay`) only if the
// order commits, and it is created once even if the relay retries.
//
//   DATABASE_URL=postgres://... node enqueue.js [customer@example.com]
//
// Environment:
//   DATABASE_URL              the application's PostgreSQL (required)
//   LEASEHOLD_OUTBOX_SCHEMA   the outbox's schema (default leasehold_outbox)
//   ROLLBACK=1                roll the transaction back after the inserts,
//                             as a failed request would: no order, no job
"use strict";

const { Client } = require("pg");

const schema = process.env.LEASEHOLD_OUTBOX_SCHEMA || "leasehold_outbox";
if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) {
  console.error(`LEASEHOLD_OUTBOX_SCHEMA=${schema}: not a plain schema name`);
  process.exit(2);
}
if (!process.env.DATABASE_URL) {
  console.error("DATABASE_URL is required");
  process.exit(2);
}

async function main() {
  const email = process.argv[2] || "customer@example.com";
  const db = new Client({ connectionString: process.env.DATABASE_URL });
  await db.connect();
  try {
    // The application's own table (created here only to keep the example
    // self-contained).
    await db.query(`CREATE TABLE IF NOT EXISTS orders (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      email text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now())`);

    await db.query("BEGIN");
    const order = await db.query(
      "INSERT INTO orders (email) VALUES ($1) RETURNING id", [email]);
    const orderId = order.rows[0].id;

    // The outbox row: the job to create. request_id is the job's
    // idempotency key; deriving it from the order makes "this order's
    // email" one job however often it is enqueued or relayed.
    const requestId = `order-${orderId}-email`;
    await db.query(
      `INSERT INTO ${schema}.outbox (request_id, queue, kind, payload, metadata)
       VALUES ($1, 'emails', 'order-confirmation', $2, $3)`,
      [
        requestId,
        Buffer.from(JSON.stringify({ order_id: orderId, to: email })),
        JSON.stringify({ source: "node-outbox" }),
      ]);

    if (process.env.ROLLBACK === "1") {
      await db.query("ROLLBACK");
      console.log(JSON.stringify({ rolled_back: true, order_id: orderId, request_id: requestId }));
      return;
    }
    await db.query("COMMIT");
    console.log(JSON.stringify({ order_id: orderId, request_id: requestId }));
  } catch (err) {
    await db.query("ROLLBACK").catch(() => {});
    throw err;
  } finally {
    await db.end();
  }
}

main().catch((err) => {
  // A CHECK violation (23514) means the row breaks a coordinator limit.
  console.error(`enqueue failed: ${err.message}${err.code ? ` (SQLSTATE ${err.code})` : ""}`);
  process.exit(1);
});
