import assert from "node:assert/strict";
import { posix, win32 } from "node:path";
import { dirname, isAbsolute, joinAs } from "../../lib/shell/file_path.ts";

const POSIX_PATHS = [
  "/etc/kubernetes/kubeconfig",
  "/etc/kubernetes/",
  "/kubeconfig",
  "/",
  "//",
  "kubeconfig",
  "conf/kubeconfig",
  "conf//kubeconfig/",
  "./kubeconfig",
  "../kubeconfig",
  "",
  ".",
];

const WINDOWS_PATHS = [
  "C:\\etc\\kproxy\\kubeconfig",
  "C:/etc/kproxy/kubeconfig",
  "C:\\kubeconfig",
  "C:\\",
  "C:",
  "C:kubeconfig",
  "\\kubeconfig",
  "/kubeconfig",
  "conf\\kubeconfig",
  "conf/kubeconfig\\",
  "kubeconfig",
  "",
];

const JOINS: string[][] = [
  ["/etc/kubernetes", "ca.crt"],
  ["/etc/kubernetes/", "pki/../ca.crt"],
  ["/etc/kubernetes", "../../../../ca.crt"],
  ["/", "ca.crt"],
  [".", "ca.crt"],
  ["conf", "../../ca.crt"],
  ["conf", "./pki/", ""],
  ["conf", "pki/"],
  ["", ""],
  ["a", ".."],
  ["C:\\kproxy", "ca.crt"],
  ["C:\\kproxy", "..\\..\\ca.crt"],
  ["C:", "ca.crt"],
  ["C:\\", "pki\\ca.crt"],
  ["\\kproxy", "/pki/ca.crt"],
];

Deno.test("isAbsolute() and dirname() agree with node:path on POSIX and Windows paths", () => {
  for (const path of POSIX_PATHS) {
    assert.equal(isAbsolute(path, "posix"), posix.isAbsolute(path), `isAbsolute ${path}`);
    assert.equal(dirname(path, "posix"), posix.dirname(path), `dirname ${path}`);
  }
  for (const path of WINDOWS_PATHS) {
    assert.equal(isAbsolute(path, "windows"), win32.isAbsolute(path), `isAbsolute ${path}`);
    assert.equal(dirname(path, "windows"), win32.dirname(path), `dirname ${path}`);
  }
});

Deno.test("joinAs() agrees with node:path's join on POSIX and Windows", () => {
  for (const segments of JOINS) {
    assert.equal(joinAs("posix", ...segments), posix.join(...segments), segments.join(" + "));
    assert.equal(joinAs("windows", ...segments), win32.join(...segments), segments.join(" + "));
  }
});
