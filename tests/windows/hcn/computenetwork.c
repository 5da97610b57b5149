/*
 * An HCN stand-in for tests: a shared library named computenetwork.dll that
 * exports the Hcn* functions kproxy's C# shim declares, with the real calling
 * conventions (UTF-16 strings in and out, out-strings allocated with malloc so
 * that .NET's Marshal.FreeCoTaskMem frees them on Linux, HRESULTs and an HNS
 * error record on failure).
 *
 * State lives in the JSON file named by KPROXY_HCN_STATE:
 *   {"networks": [...], "endpoints": [...], "loadBalancers": [...],
 *    "faults": [{"function": "HcnCreateLoadBalancer", "id": "<guid>", "hresult": N,
 *                "action": "fail" | "kill", "after": N, "count": N}],
 *    "openHandles": N}
 * Each call holds an exclusive flock on "<state>.lock" (a test changing the state
 * takes it too) and appends "<function> <id>" to "<state>.calls". Every settings
 * document is checked against the HCN v2 schema (schema.c) and refused like
 * HNS refuses it: unknown fields, wrong types, references to missing objects.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "schema.h"

#define EXPORT __attribute__((visibility("default")))

typedef int32_t HRESULT;
typedef uint16_t WCHAR;
typedef struct {
  uint32_t data1;
  uint16_t data2, data3;
  uint8_t data4[8];
} GUID;

#define S_OK ((HRESULT)0)
#define E_FAIL ((HRESULT)0x80004005)
#define E_POINTER ((HRESULT)0x80004003)
#define E_HANDLE ((HRESULT)0x80070006)
#define E_INVALIDARG ((HRESULT)0x80070057)
#define E_ALREADY_EXISTS ((HRESULT)0x800700B7)
#define E_ELEMENT_NOT_FOUND ((HRESULT)0x80070490)
#define HCN_E_NETWORK_NOT_FOUND ((HRESULT)0x803B0001)
#define HCN_E_ENDPOINT_NOT_FOUND ((HRESULT)0x803B0002)
#define HCN_E_INVALID_POLICY_TYPE ((HRESULT)0x803B000E)
#define HCN_E_PORT_ALREADY_EXISTS ((HRESULT)0x803B0013)
#define HCN_E_INVALID_JSON ((HRESULT)0x803B001B)
#define HCN_E_INVALID_JSON_REFERENCE ((HRESULT)0x803B001C)
#define HCN_E_INVALID_IP ((HRESULT)0x803B001E)
#define HCN_E_ENTITY_HAS_REFERENCES ((HRESULT)0x803B002C)
#define HCN_E_INVALID_INTERNAL_PORT ((HRESULT)0x803B002D)

typedef enum { NETWORK, ENDPOINT, LOAD_BALANCER } ObjectKind;
static const char *COLLECTIONS[] = {"networks", "endpoints", "loadBalancers"};

#define HANDLE_MAGIC 0x4b50484eu /* "KPHN" */
typedef struct {
  uint32_t magic;
  ObjectKind kind;
  uint8_t id[16];
} Handle;

/* One call: its name, the object it names, the loaded state and the answer. */
typedef struct {
  const char *function;
  char id[37];
  J *state;
  /* An exclusive flock on "<state>.lock" for the whole call, or -1. */
  int lock;
  /* An "ignoreId" fault: this creation gets an id of the stand-in's, not the caller's. */
  int ignore_id;
  HRESULT hr;
  char message[600];
} Call;

/* ---- strings --------------------------------------------------------------------------- */

static char *utf16_to_utf8(const WCHAR *text) {
  size_t n = 0;
  while (text[n]) n++;
  char *out = malloc(n * 3 + 1);
  if (!out) abort();
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t cp = text[i];
    if (cp >= 0xD800 && cp <= 0xDBFF && text[i + 1] >= 0xDC00 && text[i + 1] <= 0xDFFF) {
      cp = 0x10000 + ((cp - 0xD800) << 10) + (text[++i] - 0xDC00);
    } else if (cp >= 0xD800 && cp <= 0xDFFF) {
      free(out);
      return NULL;
    }
    if (cp < 0x80) {
      out[o++] = (char)cp;
    } else if (cp < 0x800) {
      out[o++] = (char)(0xC0 | (cp >> 6));
      out[o++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out[o++] = (char)(0xE0 | (cp >> 12));
      out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
      out[o++] = (char)(0x80 | (cp & 0x3F));
    } else {
      out[o++] = (char)(0xF0 | (cp >> 18));
      out[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
      out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
      out[o++] = (char)(0x80 | (cp & 0x3F));
    }
  }
  out[o] = 0;
  return out;
}

/* A NUL-terminated UTF-16 copy, allocated with malloc: what Marshal.FreeCoTaskMem frees. */
static WCHAR *utf8_to_utf16(const char *text) {
  size_t n = strlen(text);
  WCHAR *out = malloc((n + 1) * 2 * sizeof(WCHAR));
  if (!out) abort();
  size_t o = 0;
  const unsigned char *s = (const unsigned char *)text;
  while (*s) {
    uint32_t cp;
    int extra = *s >= 0xF0 ? 3 : *s >= 0xE0 ? 2 : *s >= 0xC0 ? 1 : 0;
    cp = extra == 3 ? *s & 0x07 : extra == 2 ? *s & 0x0F : extra == 1 ? *s & 0x1F : *s;
    s++;
    for (int i = 0; i < extra && (*s & 0xC0) == 0x80; i++) cp = (cp << 6) | (*s++ & 0x3F);
    if (cp >= 0x10000) {
      cp -= 0x10000;
      out[o++] = (WCHAR)(0xD800 + (cp >> 10));
      out[o++] = (WCHAR)(0xDC00 + (cp & 0x3FF));
    } else {
      out[o++] = (WCHAR)cp;
    }
  }
  out[o] = 0;
  return out;
}

/* ---- GUIDs ----------------------------------------------------------------------------- */

static void guid_bytes(const GUID *guid, uint8_t out[16]) {
  out[0] = (uint8_t)(guid->data1 >> 24);
  out[1] = (uint8_t)(guid->data1 >> 16);
  out[2] = (uint8_t)(guid->data1 >> 8);
  out[3] = (uint8_t)guid->data1;
  out[4] = (uint8_t)(guid->data2 >> 8);
  out[5] = (uint8_t)guid->data2;
  out[6] = (uint8_t)(guid->data3 >> 8);
  out[7] = (uint8_t)guid->data3;
  memcpy(out + 8, guid->data4, 8);
}

/* HNS writes ids in upper case. */
static void guid_text(const uint8_t id[16], char out[37]) {
  snprintf(out, 37, "%02X%02X%02X%02X-%02X%02X-%02X%02X-%02X%02X-%02X%02X%02X%02X%02X%02X",
           id[0], id[1], id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11],
           id[12], id[13], id[14], id[15]);
}

static int guid_is_zero(const uint8_t id[16]) {
  for (int i = 0; i < 16; i++) {
    if (id[i]) return 0;
  }
  return 1;
}

static int same_guid(const char *text, const uint8_t id[16]) {
  uint8_t other[16];
  return text && guid_parse(text, other) && memcmp(other, id, 16) == 0;
}

/* ---- state ----------------------------------------------------------------------------- */

static const char *state_path(void) { return getenv("KPROXY_HCN_STATE"); }

static void log_call(const Call *call) {
  const char *path = state_path();
  if (!path) return;
  char calls[4096];
  snprintf(calls, sizeof calls, "%s.calls", path);
  FILE *f = fopen(calls, "a");
  if (!f) return;
  fprintf(f, "%s %s\n", call->function, call->id[0] ? call->id : "-");
  fclose(f);
}

static int refuse(Call *call, HRESULT hr, const char *format, const char *detail) {
  call->hr = hr;
  snprintf(call->message, sizeof call->message, format, detail ? detail : "");
  return 0;
}

static int load_state(Call *call) {
  const char *path = state_path();
  if (!path) return refuse(call, E_FAIL, "HCN stand-in: KPROXY_HCN_STATE is not set%s", NULL);
  char lock[4096];
  snprintf(lock, sizeof lock, "%s.lock", path);
  call->lock = open(lock, O_RDWR | O_CREAT, 0600);
  if (call->lock < 0 || flock(call->lock, LOCK_EX) != 0) {
    return refuse(call, E_FAIL, "HCN stand-in: cannot lock %s", lock);
  }
  FILE *f = fopen(path, "rb");
  if (!f) return refuse(call, E_FAIL, "HCN stand-in: cannot read %s", path);
  char *text = NULL;
  size_t n = 0, cap = 0, got;
  char chunk[8192];
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (n + got + 1 > cap) {
      cap = (n + got + 1) * 2;
      text = realloc(text, cap);
      if (!text) abort();
    }
    memcpy(text + n, chunk, got);
    n += got;
  }
  fclose(f);
  if (!text) return refuse(call, E_FAIL, "HCN stand-in: %s is empty", path);
  text[n] = 0;
  char error[160];
  call->state = json_parse(text, error, sizeof error);
  free(text);
  if (!call->state || call->state->type != J_OBJ) {
    return refuse(call, E_FAIL, "HCN stand-in: the state file is not a JSON object%s", NULL);
  }
  for (int i = 0; i < 3; i++) {
    if (!json_get(call->state, COLLECTIONS[i])) {
      json_set(call->state, COLLECTIONS[i], json_new(J_ARR, NULL));
    }
    if (json_get(call->state, COLLECTIONS[i])->type != J_ARR) {
      return refuse(call, E_FAIL, "HCN stand-in: \"%s\" is not an array", COLLECTIONS[i]);
    }
  }
  /* No HCN call creates a network here: a seeded one must be what HNS could hold. */
  const J *networks = json_get(call->state, "networks");
  for (size_t i = 0; i < networks->n; i++) {
    char where[32], problem[512];
    snprintf(where, sizeof where, "networks[%zu]", i);
    if (schema_check(networks->items[i], NETWORK_SCHEMA, where, problem, sizeof problem) !=
        SCHEMA_OK) {
      return refuse(call, E_FAIL, "HCN stand-in: the state holds an invalid network: %s", problem);
    }
  }
  return 1;
}

/* Writes the state to a temporary file and renames it over the old one. */
static int save_state(Call *call) {
  const char *path = state_path();
  char temp[4096];
  snprintf(temp, sizeof temp, "%s.%d.tmp", path, (int)getpid());
  char *text = json_write(call->state);
  FILE *f = fopen(temp, "wb");
  int ok = f && fputs(text, f) >= 0;
  if (f) ok = (fclose(f) == 0) && ok;
  free(text);
  if (!ok || rename(temp, path) != 0) {
    unlink(temp);
    return refuse(call, E_FAIL, "HCN stand-in: cannot write %s", path);
  }
  return 1;
}

static J *collection(const Call *call, ObjectKind kind) {
  return json_get(call->state, COLLECTIONS[kind]);
}

static long find_object(const Call *call, ObjectKind kind, const uint8_t id[16]) {
  J *items = collection(call, kind);
  for (size_t i = 0; i < items->n; i++) {
    J *object_id = json_get(items->items[i], "ID");
    if (object_id && object_id->type == J_STR && same_guid(object_id->text, id)) return (long)i;
  }
  return -1;
}

static long long number_of(const J *value, long long fallback) {
  return value && value->type == J_NUM ? strtoll(value->text, NULL, 0) : fallback;
}

static void add_open_handles(Call *call, int delta) {
  long long open = number_of(json_get(call->state, "openHandles"), 0) + delta;
  char text[32];
  snprintf(text, sizeof text, "%lld", open);
  json_set(call->state, "openHandles", json_new(J_NUM, text));
}

/*
 * Applies an armed fault for this call, if any: the first `after` matching calls
 * pass, then `count` calls (-1: all) fail: "fail" answers with its HRESULT, "kill"
 * saves the state and kills the process (a script killed half-way).
 */
static int apply_fault(Call *call) {
  J *faults = json_get(call->state, "faults");
  if (!faults || faults->type != J_ARR) return 1;
  for (size_t i = 0; i < faults->n; i++) {
    J *fault = faults->items[i];
    J *function = json_get(fault, "function");
    J *id = json_get(fault, "id");
    uint8_t wanted[16];
    if (!function || function->type != J_STR || strcmp(function->text, call->function) != 0) {
      continue;
    }
    if (id && !(id->type == J_STR && guid_parse(id->text, wanted) && same_guid(call->id, wanted))) {
      continue;
    }
    long long after = number_of(json_get(fault, "after"), 0);
    if (after > 0) {
      char text[32];
      snprintf(text, sizeof text, "%lld", after - 1);
      json_set(fault, "after", json_new(J_NUM, text));
      return save_state(call);
    }
    long long count = number_of(json_get(fault, "count"), 1);
    /* Read before the fault is spent: a last use frees it. */
    const J *action = json_get(fault, "action");
    int kill_caller = action && action->type == J_STR && strcmp(action->text, "kill") == 0;
    int ignore_id = action && action->type == J_STR && strcmp(action->text, "ignoreId") == 0;
    HRESULT hr = (HRESULT)(uint32_t)number_of(json_get(fault, "hresult"), (uint32_t)E_FAIL);
    if (count > 0) {
      char text[32];
      snprintf(text, sizeof text, "%lld", count - 1);
      json_set(fault, "count", json_new(J_NUM, text));
      if (count == 1) json_free(json_take(faults, i));
      if (!save_state(call)) return 0;
    }
    if (kill_caller) kill(getpid(), SIGKILL);
    if (ignore_id) {
      call->ignore_id = 1;
      return 1;
    }
    return refuse(call, hr, "Injected failure of %s", call->function);
  }
  return 1;
}

/* Starts a call: logs it, loads the state and applies any armed fault. */
static int begin(Call *call, const char *function, const uint8_t *id) {
  memset(call, 0, sizeof *call);
  call->lock = -1;
  call->function = function;
  if (id) guid_text(id, call->id);
  log_call(call);
  return load_state(call) && apply_fault(call);
}

/* Ends a call: frees the state and writes the error record when it failed. */
static HRESULT finish(Call *call, WCHAR **error_record) {
  json_free(call->state);
  if (call->lock >= 0) close(call->lock);
  if (error_record) *error_record = NULL;
  if (call->hr == S_OK) return S_OK;
  if (error_record) {
    J *record = json_new(J_OBJ, NULL);
    char message[640];
    snprintf(message, sizeof message, "%s ", call->message);
    char code[32];
    snprintf(code, sizeof code, "%u", (uint32_t)call->hr);
    json_set(record, "Success", json_new(J_BOOL, "false"));
    json_set(record, "Error", json_new(J_STR, message));
    json_set(record, "ErrorCode", json_new(J_NUM, code));
    char *text = json_write(record);
    *error_record = utf8_to_utf16(text);
    free(text);
    json_free(record);
  }
  return call->hr;
}

/* Parses a UTF-16 document and checks it against `fields`. */
static J *parse_document(Call *call, const WCHAR *text, const Field *fields, const char *what) {
  if (!text) return refuse(call, E_POINTER, "Invalid JSON document string. %s is NULL", what), NULL;
  char *utf8 = utf16_to_utf8(text);
  if (!utf8) return refuse(call, HCN_E_INVALID_JSON, "Invalid JSON document string. %s", what), NULL;
  char error[512];
  J *document = json_parse(utf8, error, sizeof error);
  free(utf8);
  if (!document) {
    char detail[700];
    snprintf(detail, sizeof detail, "%s: %s", what, error);
    return refuse(call, HCN_E_INVALID_JSON, "Invalid JSON document string. %s", detail), NULL;
  }
  SchemaResult result = schema_check(document, fields, what, error, sizeof error);
  if (result == SCHEMA_OK) return document;
  json_free(document);
  HRESULT hr = result == SCHEMA_INVALID_IP            ? HCN_E_INVALID_IP
               : result == SCHEMA_INVALID_POLICY_TYPE ? HCN_E_INVALID_POLICY_TYPE
                                                      : HCN_E_INVALID_JSON;
  return refuse(call, hr, "Invalid JSON document string. %s", error), NULL;
}

static int check_schema_version(Call *call, const J *document) {
  const J *version = json_get(document, "SchemaVersion");
  if (!version || number_of(json_get(version, "Major"), 0) != 2) {
    return refuse(call, HCN_E_INVALID_JSON, "Invalid JSON document string. %s",
                  "SchemaVersion must be 2.x");
  }
  return 1;
}

static WCHAR *string_out(const char *text) { return utf8_to_utf16(text); }

/* ---- enumerate, open, query, close ----------------------------------------------------- */

/* Does `object` match every member of the query's Filter (string equality, IDs any case)? */
static int matches_filter(const J *object, const J *filter) {
  for (size_t i = 0; filter && i < filter->n; i++) {
    const J *have = json_get(object, filter->keys[i]);
    const char *want = filter->items[i]->text;
    uint8_t id[16];
    if (!have || have->type != J_STR) return 0;
    if (strcmp(filter->keys[i], "ID") == 0 && guid_parse(want, id)) {
      if (!same_guid(have->text, id)) return 0;
    } else if (strcmp(have->text, want) != 0) {
      return 0;
    }
  }
  return 1;
}

/* Checks a HostComputeQuery; returns its Filter (an object of strings) or an empty one. */
static J *parse_query(Call *call, const WCHAR *query) {
  J *document = parse_document(call, query, QUERY_SCHEMA, "HostComputeQuery");
  if (!document) return NULL;
  J *filter_text = json_get(document, "Filter");
  J *filter = NULL;
  if (filter_text && filter_text->text[0]) {
    char error[160];
    filter = json_parse(filter_text->text, error, sizeof error);
    int ok = filter && filter->type == J_OBJ;
    for (size_t i = 0; ok && i < filter->n; i++) {
      ok = filter->items[i]->type == J_STR &&
           (strcmp(filter->keys[i], "ID") == 0 || strcmp(filter->keys[i], "Name") == 0);
    }
    if (!ok) {
      json_free(filter);
      json_free(document);
      return refuse(call, HCN_E_INVALID_JSON, "Invalid JSON document string. %s",
                    "HostComputeQuery.Filter: expected an object of ID or Name strings"),
             NULL;
    }
  }
  json_free(document);
  return filter ? filter : json_new(J_OBJ, NULL);
}

static HRESULT enumerate(ObjectKind kind, const char *function, const WCHAR *query, WCHAR **list,
                         WCHAR **error) {
  Call call;
  J *filter;
  if (list) *list = NULL;
  if (begin(&call, function, NULL)) {
    if (!list) {
      refuse(&call, E_POINTER, "%s: NULL output", function);
    } else if ((filter = parse_query(&call, query)) != NULL) {
      J *ids = json_new(J_ARR, NULL);
      J *items = collection(&call, kind);
      for (size_t i = 0; i < items->n; i++) {
        J *id = json_get(items->items[i], "ID");
        uint8_t bytes[16];
        char text[37];
        if (!id || id->type != J_STR || !guid_parse(id->text, bytes)) continue;
        if (!matches_filter(items->items[i], filter)) continue;
        guid_text(bytes, text);
        json_push(ids, json_new(J_STR, text));
      }
      char *text = json_write(ids);
      *list = string_out(text);
      free(text);
      json_free(ids);
      json_free(filter);
    }
  }
  return finish(&call, error);
}

static const HRESULT NOT_FOUND[] = {HCN_E_NETWORK_NOT_FOUND, HCN_E_ENDPOINT_NOT_FOUND,
                                    E_ELEMENT_NOT_FOUND};
static const char *NOT_FOUND_MESSAGE[] = {"The network was not found.",
                                          "The endpoint was not found.", "Element not found."};

static HRESULT open_object(ObjectKind kind, const char *function, const GUID *guid,
                           void **handle, WCHAR **error) {
  Call call;
  uint8_t id[16] = {0};
  if (guid) guid_bytes(guid, id);
  if (handle) *handle = NULL;
  if (begin(&call, function, id)) {
    if (!guid || !handle) {
      refuse(&call, E_POINTER, "%s: NULL argument", function);
    } else if (find_object(&call, kind, id) < 0) {
      refuse(&call, NOT_FOUND[kind], "%s", NOT_FOUND_MESSAGE[kind]);
    } else {
      Handle *h = malloc(sizeof *h);
      if (!h) abort();
      h->magic = HANDLE_MAGIC;
      h->kind = kind;
      memcpy(h->id, id, 16);
      add_open_handles(&call, 1);
      if (save_state(&call)) {
        *handle = h;
      } else {
        free(h);
      }
    }
  }
  return finish(&call, error);
}

static Handle *handle_of(void *handle, ObjectKind kind) {
  Handle *h = handle;
  return h && h->magic == HANDLE_MAGIC && h->kind == kind ? h : NULL;
}

static HRESULT query_object(ObjectKind kind, const char *function, void *handle,
                            const WCHAR *query, WCHAR **properties, WCHAR **error) {
  Call call;
  Handle *h = handle_of(handle, kind);
  if (properties) *properties = NULL;
  if (begin(&call, function, h ? h->id : NULL)) {
    long index;
    J *filter;
    if (!h) {
      refuse(&call, E_HANDLE, "%s: invalid handle", function);
    } else if (!properties) {
      refuse(&call, E_POINTER, "%s: NULL output", function);
    } else if ((filter = parse_query(&call, query)) != NULL) {
      json_free(filter);
      if ((index = find_object(&call, kind, h->id)) < 0) {
        refuse(&call, NOT_FOUND[kind], "%s", NOT_FOUND_MESSAGE[kind]);
      } else {
        char *text = json_write(collection(&call, kind)->items[index]);
        *properties = string_out(text);
        free(text);
      }
    }
  }
  return finish(&call, error);
}

static HRESULT close_object(ObjectKind kind, const char *function, void *handle) {
  Call call;
  Handle *h = handle_of(handle, kind);
  if (begin(&call, function, h ? h->id : NULL)) {
    if (!h) {
      refuse(&call, E_HANDLE, "%s: invalid handle", function);
    } else {
      h->magic = 0;
      free(h);
      add_open_handles(&call, -1);
      save_state(&call);
    }
  }
  return finish(&call, NULL);
}

/* ---- create and delete ----------------------------------------------------------------- */

/* The object to store: ID first, then the settings' members (taken from `settings`). */
static J *stored_object(J *settings, const uint8_t id[16]) {
  char text[37];
  guid_text(id, text);
  J *object = json_new(J_OBJ, NULL);
  json_set(object, "ID", json_new(J_STR, text));
  while (settings->n > 0) {
    char *key = settings->keys[0];
    settings->keys[0] = NULL;
    J *item = json_take(settings, 0);
    if (strcmp(key, "ID") == 0) {
      json_free(item);
    } else {
      json_set(object, key, item);
    }
    free(key);
  }
  json_free(settings);
  return object;
}

/* The id of a new object: the caller's, or one from the settings' ID, or a fresh one. */
static int new_id(Call *call, const GUID *guid, const J *settings, uint8_t id[16]) {
  uint8_t from_settings[16];
  const J *settings_id = json_get(settings, "ID");
  int has_settings_id = settings_id && guid_parse(settings_id->text, from_settings);
  guid_bytes(guid, id);
  if (guid_is_zero(id)) {
    if (has_settings_id) {
      memcpy(id, from_settings, 16);
    } else {
      int fd = open("/dev/urandom", O_RDONLY);
      if (fd < 0 || read(fd, id, 16) != 16) abort();
      close(fd);
      id[6] = (uint8_t)((id[6] & 0x0F) | 0x40);
      id[8] = (uint8_t)((id[8] & 0x3F) | 0x80);
    }
  } else if (has_settings_id && memcmp(id, from_settings, 16) != 0) {
    return refuse(call, E_INVALIDARG, "%s", "The ID in the settings differs from the Id argument.");
  }
  return 1;
}

static int family_of(const char *ip) { return strchr(ip, ':') ? 6 : 4; }

/* HNS refuses a second load balancer for the same frontend, protocol and port. */
static int same_frontend(const J *a, const J *b) {
  const J *pa = json_get(a, "PortMappings"), *pb = json_get(b, "PortMappings");
  const J *va = json_get(a, "FrontendVIPs"), *vb = json_get(b, "FrontendVIPs");
  if (!pa || !pb || pa->n == 0 || pb->n == 0) return 0;
  if ((number_of(json_get(a, "Flags"), 0) & 2) != (number_of(json_get(b, "Flags"), 0) & 2)) return 0;
  if (number_of(json_get(pa->items[0], "Protocol"), 0) !=
          number_of(json_get(pb->items[0], "Protocol"), 0) ||
      number_of(json_get(pa->items[0], "ExternalPort"), 0) !=
          number_of(json_get(pb->items[0], "ExternalPort"), 0)) {
    return 0;
  }
  size_t na = va ? va->n : 0, nb = vb ? vb->n : 0;
  if (na == 0 || nb == 0) return na == nb;
  for (size_t i = 0; i < na; i++) {
    for (size_t j = 0; j < nb; j++) {
      if (strcmp(va->items[i]->text, vb->items[j]->text) == 0) return 1;
    }
  }
  return 0;
}

static int check_load_balancer(Call *call, const J *settings) {
  const J *endpoints = json_get(settings, "HostComputeEndpoints");
  const J *mappings = json_get(settings, "PortMappings");
  const J *vips = json_get(settings, "FrontendVIPs");
  const J *source = json_get(settings, "SourceVIP");
  int ipv6 = (number_of(json_get(settings, "Flags"), 0) & 2) != 0;
  if (!check_schema_version(call, settings)) return 0;
  for (size_t i = 0; endpoints && i < endpoints->n; i++) {
    uint8_t id[16];
    guid_parse(endpoints->items[i]->text, id);
    if (find_object(call, ENDPOINT, id) < 0) {
      return refuse(call, HCN_E_ENDPOINT_NOT_FOUND, "The endpoint was not found: %s",
                    endpoints->items[i]->text);
    }
  }
  if (!mappings || mappings->n == 0) {
    return refuse(call, HCN_E_INVALID_JSON, "Invalid JSON document string. %s",
                  "HostComputeLoadBalancer.PortMappings is required");
  }
  for (size_t i = 0; i < mappings->n; i++) {
    if (number_of(json_get(mappings->items[i], "InternalPort"), 0) == 0) {
      return refuse(call, HCN_E_INVALID_INTERNAL_PORT, "%s",
                    "The internal port must exist and cannot be zero.");
    }
  }
  for (size_t i = 0; vips && i < vips->n; i++) {
    if (family_of(vips->items[i]->text) != (ipv6 ? 6 : 4)) {
      return refuse(call, HCN_E_INVALID_IP, "The frontend VIP %s does not match the IPv6 flag.",
                    vips->items[i]->text);
    }
  }
  if (source && family_of(source->text) != (ipv6 ? 6 : 4)) {
    return refuse(call, HCN_E_INVALID_IP, "The source VIP %s does not match the IPv6 flag.",
                  source->text);
  }
  J *existing = collection(call, LOAD_BALANCER);
  for (size_t i = 0; i < existing->n; i++) {
    if (same_frontend(existing->items[i], settings)) {
      return refuse(call, HCN_E_PORT_ALREADY_EXISTS, "%s", "The specified port already exists.");
    }
  }
  return 1;
}

static int check_endpoint(Call *call, const J *settings, const Handle *network) {
  const J *net = json_get(settings, "HostComputeNetwork");
  if (!check_schema_version(call, settings)) return 0;
  if (net && !same_guid(net->text, network->id)) {
    return refuse(call, HCN_E_INVALID_JSON_REFERENCE, "The reference is invalid in the JSON document: %s",
                  net->text);
  }
  return 1;
}

static int referenced_by_load_balancer(const Call *call, const uint8_t id[16]) {
  J *balancers = collection(call, LOAD_BALANCER);
  for (size_t i = 0; i < balancers->n; i++) {
    J *endpoints = json_get(balancers->items[i], "HostComputeEndpoints");
    for (size_t j = 0; endpoints && j < endpoints->n; j++) {
      if (same_guid(endpoints->items[j]->text, id)) return 1;
    }
  }
  return 0;
}

static HRESULT delete_object(ObjectKind kind, const char *function, const GUID *guid,
                             WCHAR **error) {
  Call call;
  uint8_t id[16] = {0};
  if (guid) guid_bytes(guid, id);
  if (begin(&call, function, id)) {
    long index = guid ? find_object(&call, kind, id) : -1;
    if (!guid) {
      refuse(&call, E_POINTER, "%s: NULL id", function);
    } else if (index < 0) {
      refuse(&call, NOT_FOUND[kind], "%s", NOT_FOUND_MESSAGE[kind]);
    } else if (kind == ENDPOINT && referenced_by_load_balancer(&call, id)) {
      refuse(&call, HCN_E_ENTITY_HAS_REFERENCES, "%s",
             "The specified entity cannot be removed while it still has references.");
    } else {
      json_free(json_take(collection(&call, kind), (size_t)index));
      save_state(&call);
    }
  }
  return finish(&call, error);
}

static HRESULT create_object(ObjectKind kind, const char *function, void *network_handle,
                             const GUID *guid, const WCHAR *settings, void **handle,
                             WCHAR **error) {
  Call call;
  uint8_t id[16] = {0};
  if (guid) guid_bytes(guid, id);
  if (handle) *handle = NULL;
  Handle *network = kind == ENDPOINT ? handle_of(network_handle, NETWORK) : NULL;
  if (begin(&call, function, guid_is_zero(id) ? NULL : id)) {
    const char *what = kind == ENDPOINT ? "HostComputeEndpoint" : "HostComputeLoadBalancer";
    J *document;
    if (!guid || !handle) {
      refuse(&call, E_POINTER, "%s: NULL argument", function);
    } else if (kind == ENDPOINT && !network) {
      refuse(&call, E_HANDLE, "%s: invalid network handle", function);
    } else if (kind == ENDPOINT && find_object(&call, NETWORK, network->id) < 0) {
      refuse(&call, HCN_E_NETWORK_NOT_FOUND, "%s", NOT_FOUND_MESSAGE[NETWORK]);
    } else if ((document = parse_document(&call, settings, kind == ENDPOINT ? ENDPOINT_SCHEMA
                                                                            : LOAD_BALANCER_SCHEMA,
                                          what)) != NULL) {
      static const GUID zero = {0, 0, 0, {0}};
      int ok = new_id(&call, call.ignore_id ? &zero : guid, document, id) &&
               (kind == ENDPOINT ? check_endpoint(&call, document, network)
                                 : check_load_balancer(&call, document));
      if (ok && find_object(&call, kind, id) >= 0) {
        ok = refuse(&call, E_ALREADY_EXISTS, "%s", "Cannot create a file when that file already exists.");
      }
      if (!ok) {
        json_free(document);
      } else {
        J *object = stored_object(document, id);
        if (kind == ENDPOINT) {
          char text[37];
          guid_text(network->id, text);
          json_set(object, "HostComputeNetwork", json_new(J_STR, text));
        }
        json_push(collection(&call, kind), object);
        Handle *h = malloc(sizeof *h);
        if (!h) abort();
        h->magic = HANDLE_MAGIC;
        h->kind = kind;
        memcpy(h->id, id, 16);
        add_open_handles(&call, 1);
        if (save_state(&call)) {
          *handle = h;
        } else {
          free(h);
        }
      }
    }
  }
  return finish(&call, error);
}

/* ---- exports --------------------------------------------------------------------------- */

EXPORT HRESULT HcnEnumerateNetworks(const WCHAR *query, WCHAR **networks, WCHAR **error) {
  return enumerate(NETWORK, "HcnEnumerateNetworks", query, networks, error);
}
EXPORT HRESULT HcnOpenNetwork(const GUID *id, void **network, WCHAR **error) {
  return open_object(NETWORK, "HcnOpenNetwork", id, network, error);
}
EXPORT HRESULT HcnQueryNetworkProperties(void *network, const WCHAR *query, WCHAR **properties,
                                         WCHAR **error) {
  return query_object(NETWORK, "HcnQueryNetworkProperties", network, query, properties, error);
}
EXPORT HRESULT HcnCloseNetwork(void *network) {
  return close_object(NETWORK, "HcnCloseNetwork", network);
}
EXPORT HRESULT HcnEnumerateEndpoints(const WCHAR *query, WCHAR **endpoints, WCHAR **error) {
  return enumerate(ENDPOINT, "HcnEnumerateEndpoints", query, endpoints, error);
}
EXPORT HRESULT HcnOpenEndpoint(const GUID *id, void **endpoint, WCHAR **error) {
  return open_object(ENDPOINT, "HcnOpenEndpoint", id, endpoint, error);
}
EXPORT HRESULT HcnQueryEndpointProperties(void *endpoint, const WCHAR *query, WCHAR **properties,
                                          WCHAR **error) {
  return query_object(ENDPOINT, "HcnQueryEndpointProperties", endpoint, query, properties, error);
}
EXPORT HRESULT HcnCreateEndpoint(void *network, const GUID *id, const WCHAR *settings,
                                 void **endpoint, WCHAR **error) {
  return create_object(ENDPOINT, "HcnCreateEndpoint", network, id, settings, endpoint, error);
}
EXPORT HRESULT HcnDeleteEndpoint(const GUID *id, WCHAR **error) {
  return delete_object(ENDPOINT, "HcnDeleteEndpoint", id, error);
}
EXPORT HRESULT HcnCloseEndpoint(void *endpoint) {
  return close_object(ENDPOINT, "HcnCloseEndpoint", endpoint);
}
EXPORT HRESULT HcnEnumerateLoadBalancers(const WCHAR *query, WCHAR **balancers, WCHAR **error) {
  return enumerate(LOAD_BALANCER, "HcnEnumerateLoadBalancers", query, balancers, error);
}
EXPORT HRESULT HcnOpenLoadBalancer(const GUID *id, void **balancer, WCHAR **error) {
  return open_object(LOAD_BALANCER, "HcnOpenLoadBalancer", id, balancer, error);
}
EXPORT HRESULT HcnQueryLoadBalancerProperties(void *balancer, const WCHAR *query,
                                              WCHAR **properties, WCHAR **error) {
  return query_object(LOAD_BALANCER, "HcnQueryLoadBalancerProperties", balancer, query,
                      properties, error);
}
EXPORT HRESULT HcnCreateLoadBalancer(const GUID *id, const WCHAR *settings, void **balancer,
                                     WCHAR **error) {
  return create_object(LOAD_BALANCER, "HcnCreateLoadBalancer", NULL, id, settings, balancer,
                       error);
}
EXPORT HRESULT HcnDeleteLoadBalancer(const GUID *id, WCHAR **error) {
  return delete_object(LOAD_BALANCER, "HcnDeleteLoadBalancer", id, error);
}
EXPORT HRESULT HcnCloseLoadBalancer(void *balancer) {
  return close_object(LOAD_BALANCER, "HcnCloseLoadBalancer", balancer);
}
