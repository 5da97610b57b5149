/**
 * Collects the log records a piece of code writes, for tests that assert on
 * warnings.
 *
 * @module
 */

import { configureLogging, type LogRecord, resetLogging } from "../../lib/core/logger.ts";

/**
 * Runs `body` with every record of `category` (and the categories below it)
 * collected in the array it is given, then resets logging.
 */
export async function withLogRecords(
  category: string[],
  body: (records: LogRecord[]) => void | Promise<void>,
): Promise<void> {
  const records: LogRecord[] = [];
  configureLogging([{ category, sink: (record) => records.push(record), lowestLevel: "debug" }]);
  try {
    await body(records);
  } finally {
    resetLogging();
  }
}
