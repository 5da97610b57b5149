/**
 * Collects the log records a piece of code writes, for tests that assert on
 * warnings.
 *
 * @module
 */

import { configure, type LogRecord, reset } from "@logtape/logtape";

/**
 * Runs `body` with every record of `category` (and the categories below it)
 * collected in the array it is given, then resets logging.
 */
export async function withLogRecords(
  category: string[],
  body: (records: LogRecord[]) => void | Promise<void>,
): Promise<void> {
  const records: LogRecord[] = [];
  await configure({
    sinks: { buffer: (record) => records.push(record) },
    loggers: [
      { category, sinks: ["buffer"], lowestLevel: "debug" },
      { category: ["logtape", "meta"], sinks: [], lowestLevel: "error" },
    ],
    reset: true,
  });
  try {
    await body(records);
  } finally {
    await reset();
  }
}
