/*
 * The HCN v2 schema as hcsshim's `hcn` package declares it (HostComputeEndpoint,
 * HostComputeLoadBalancer, LoadBalancerPortMapping, HostComputeNetwork,
 * HostComputeQuery, SchemaVersion, Dns, Health, the policy settings kproxy
 * reads or writes): field names and types from the Go struct tags, and a checker
 * that refuses unknown fields, wrong types, null and out-of-range values.
 */
#ifndef KPROXY_HCN_SCHEMA_H
#define KPROXY_HCN_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "json.h"

typedef enum {
  K_STRING,
  K_GUID,
  K_IP,
  K_PREFIX,
  K_MAC,
  K_UINT,
  K_BOOL,
  K_OBJECT,
  /* An object whose members are checked elsewhere (policy settings). */
  K_ANY_OBJECT,
  K_ARRAY,
  /* Any JSON value (Go's interface{} and json.RawMessage). */
  K_ANY,
} Kind;

typedef struct Field {
  const char *name;
  Kind kind;
  /* K_ARRAY: the kind of each element. */
  Kind element;
  /* K_OBJECT, or K_ARRAY of K_OBJECT: the members, ending with a NULL name. */
  const struct Field *members;
  /* K_UINT: the largest value. */
  uint32_t max;
  /* K_UINT flags: the bits that have a meaning; 0 when the value is not a flag set. */
  uint32_t bits;
} Field;

extern const Field ENDPOINT_SCHEMA[];
extern const Field LOAD_BALANCER_SCHEMA[];
extern const Field QUERY_SCHEMA[];
extern const Field NETWORK_SCHEMA[];
extern const Field PROVIDER_ADDRESS_SCHEMA[];

/* Reasons a document is refused, mapped to HCN error codes by the caller. */
typedef enum { SCHEMA_OK, SCHEMA_INVALID_JSON, SCHEMA_INVALID_IP, SCHEMA_INVALID_POLICY_TYPE } SchemaResult;

/* Checks `value` (an object) against `fields`; `where` names it in `error`. */
SchemaResult schema_check(const J *value, const Field *fields, const char *where, char *error,
                          size_t error_size);

/* Parses a GUID in its 36-character form, any case. */
int guid_parse(const char *text, uint8_t out[16]);

#endif
