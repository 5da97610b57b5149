/* See schema.h. */
#include "schema.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U8 0xFFu
#define U16 0xFFFFu
#define U32 0xFFFFFFFFu

static const Field VERSION[] = {
    {"Major", K_UINT, 0, NULL, U32, 0},
    {"Minor", K_UINT, 0, NULL, U32, 0},
    {NULL},
};

static const Field IP_CONFIG[] = {
    {"IpAddress", K_IP, 0, NULL, 0, 0},
    {"PrefixLength", K_UINT, 0, NULL, 128, 0},
    {NULL},
};

/* Dns (hcnnetwork.go): every member omitempty, so hcsshim writes "Dns":{} when none is set. */
static const Field DNS[] = {
    {"Domain", K_STRING, 0, NULL, 0, 0},
    {"Search", K_ARRAY, K_STRING, NULL, 0, 0},
    {"ServerList", K_ARRAY, K_IP, NULL, 0, 0},
    {"Options", K_ARRAY, K_STRING, NULL, 0, 0},
    {NULL},
};

/* ExtraParams (hcn.go): Resources and SharedContainers are json.RawMessage. */
static const Field EXTRA_PARAMS[] = {
    {"Resources", K_ANY, 0, NULL, 0, 0},
    {"SharedContainers", K_ANY, 0, NULL, 0, 0},
    {"LayeredOn", K_STRING, 0, NULL, 0, 0},
    {"SwitchGuid", K_STRING, 0, NULL, 0, 0},
    {"UtilityVM", K_STRING, 0, NULL, 0, 0},
    {"VirtualMachine", K_STRING, 0, NULL, 0, 0},
    {NULL},
};

/* Health (hcn.go): Data is interface{}; Extra is a struct, so hcsshim always writes
 * "Health":{"Extra":{}}. */
static const Field HEALTH[] = {
    {"Data", K_ANY, 0, NULL, 0, 0},
    {"Extra", K_OBJECT, 0, EXTRA_PARAMS, 0, 0},
    {NULL},
};

static const Field ROUTE[] = {
    {"NextHop", K_IP, 0, NULL, 0, 0},
    {"DestinationPrefix", K_PREFIX, 0, NULL, 0, 0},
    {"Metric", K_UINT, 0, NULL, U16, 0},
    {NULL},
};

static const Field POLICY[] = {
    {"Type", K_STRING, 0, NULL, 0, 0},
    {"Settings", K_ANY_OBJECT, 0, NULL, 0, 0},
    {NULL},
};

/* EndpointFlags: RemoteEndpoint 1, DisableICMP 2, EnableMirroring 4. */
const Field ENDPOINT_SCHEMA[] = {
    {"ID", K_GUID, 0, NULL, 0, 0},
    {"Name", K_STRING, 0, NULL, 0, 0},
    {"HostComputeNetwork", K_GUID, 0, NULL, 0, 0},
    {"HostComputeNamespace", K_GUID, 0, NULL, 0, 0},
    {"Policies", K_ARRAY, K_OBJECT, POLICY, 0, 0},
    {"IpConfigurations", K_ARRAY, K_OBJECT, IP_CONFIG, 0, 0},
    {"Dns", K_OBJECT, 0, DNS, 0, 0},
    {"Routes", K_ARRAY, K_OBJECT, ROUTE, 0, 0},
    {"MacAddress", K_MAC, 0, NULL, 0, 0},
    {"Flags", K_UINT, 0, NULL, U32, 0x7},
    {"Health", K_OBJECT, 0, HEALTH, 0, 0},
    {"SchemaVersion", K_OBJECT, 0, VERSION, 0, 0},
    {NULL},
};

static const Field NETWORK_POLICY[] = {
    {"Type", K_STRING, 0, NULL, 0, 0},
    {"Settings", K_ANY_OBJECT, 0, NULL, 0, 0},
    {NULL},
};

static const Field MAC_RANGE[] = {
    {"StartMacAddress", K_MAC, 0, NULL, 0, 0},
    {"EndMacAddress", K_MAC, 0, NULL, 0, 0},
    {NULL},
};

static const Field MAC_POOL[] = {
    {"Ranges", K_ARRAY, K_OBJECT, MAC_RANGE, 0, 0},
    {NULL},
};

/* SubnetFlags: EnableVlanIsolation 1. Policies are json.RawMessage. */
static const Field SUBNET[] = {
    {"IpAddressPrefix", K_PREFIX, 0, NULL, 0, 0},
    {"Policies", K_ARRAY, K_ANY, NULL, 0, 0},
    {"Routes", K_ARRAY, K_OBJECT, ROUTE, 0, 0},
    {"Flags", K_UINT, 0, NULL, U32, 0x1},
    {NULL},
};

static const Field IPAM[] = {
    {"Type", K_STRING, 0, NULL, 0, 0},
    {"Subnets", K_ARRAY, K_OBJECT, SUBNET, 0, 0},
    {NULL},
};

/* HostComputeNetwork (hcnnetwork.go). NetworkFlags: EnableDns 1, EnableDhcp 2, EnableMirroring 4,
 * EnableNonPersistent 8, IsolateVSwitch 16, EnableFlowSteering 32, DisableHostPort 1024,
 * EnableIov 8192. MacPool, Dns, Health and SchemaVersion are structs: always written. */
const Field NETWORK_SCHEMA[] = {
    {"ID", K_GUID, 0, NULL, 0, 0},
    {"Name", K_STRING, 0, NULL, 0, 0},
    {"Type", K_STRING, 0, NULL, 0, 0},
    {"Policies", K_ARRAY, K_OBJECT, NETWORK_POLICY, 0, 0},
    {"MacPool", K_OBJECT, 0, MAC_POOL, 0, 0},
    {"Dns", K_OBJECT, 0, DNS, 0, 0},
    {"Ipams", K_ARRAY, K_OBJECT, IPAM, 0, 0},
    {"Flags", K_UINT, 0, NULL, U32, 0x203F},
    {"Health", K_OBJECT, 0, HEALTH, 0, 0},
    {"SchemaVersion", K_OBJECT, 0, VERSION, 0, 0},
    {NULL},
};

/* RemoteSubnetRoutePolicySetting: no omitempty, every member always written. */
static const Field REMOTE_SUBNET_ROUTE_SCHEMA[] = {
    {"DestinationPrefix", K_PREFIX, 0, NULL, 0, 0},
    {"IsolationId", K_UINT, 0, NULL, U16, 0},
    {"ProviderAddress", K_IP, 0, NULL, 0, 0},
    {"DistributedRouterMacAddress", K_MAC, 0, NULL, 0, 0},
    {NULL},
};

/* LoadBalancerPortMappingFlags: ILB 1, LocalRoutedVIP 2, UseMux 4, PreserveDIP 8,
 * VipExternalIP 16. LoadBalancerDistribution: None 0, SourceIPProtocol 1, SourceIP 2. */
static const Field PORT_MAPPING[] = {
    {"Protocol", K_UINT, 0, NULL, U32, 0},
    {"InternalPort", K_UINT, 0, NULL, U16, 0},
    {"ExternalPort", K_UINT, 0, NULL, U16, 0},
    {"DistributionType", K_UINT, 0, NULL, 2, 0},
    {"Flags", K_UINT, 0, NULL, U32, 0x1F},
    {NULL},
};

/* LoadBalancerFlags: DSR 1, IPv6 2. */
const Field LOAD_BALANCER_SCHEMA[] = {
    {"ID", K_GUID, 0, NULL, 0, 0},
    {"HostComputeEndpoints", K_ARRAY, K_GUID, NULL, 0, 0},
    {"SourceVIP", K_IP, 0, NULL, 0, 0},
    {"FrontendVIPs", K_ARRAY, K_IP, NULL, 0, 0},
    {"PortMappings", K_ARRAY, K_OBJECT, PORT_MAPPING, 0, 0},
    {"SchemaVersion", K_OBJECT, 0, VERSION, 0, 0},
    {"Flags", K_UINT, 0, NULL, U32, 0x3},
    {NULL},
};

/* HostComputeQueryFlags: None 0, Detailed 1. Filter is itself a JSON document. */
const Field QUERY_SCHEMA[] = {
    {"SchemaVersion", K_OBJECT, 0, VERSION, 0, 0},
    {"Flags", K_UINT, 0, NULL, U32, 0x1},
    {"Filter", K_STRING, 0, NULL, 0, 0},
    {NULL},
};

const Field PROVIDER_ADDRESS_SCHEMA[] = {
    {"ProviderAddress", K_IP, 0, NULL, 0, 0},
    {NULL},
};

/* Endpoint policy types hcsshim knows (EndpointPolicyType). */
static const char *POLICY_TYPES[] = {
    "PortMapping", "ACL", "QOS", "L2Driver", "OutBoundNAT", "SDNRoute", "L4Proxy", "L4WFPPROXY",
    "PortName", "EncapOverhead", "Iov", "ProviderAddress", "InterfaceConstraint", "TierAcl", NULL,
};

/* Network policy types hcsshim knows (NetworkPolicyType). */
static const char *NETWORK_POLICY_TYPES[] = {
    "SourceMacAddress", "NetAdapterName", "VSwitchExtension", "DrMacAddress", "AutomaticDNS",
    "InterfaceConstraint", "ProviderAddress", "RemoteSubnetRoute", "VxlanPort", "HostRoute",
    "SetPolicy", "L4Proxy", "LayerConstraint", "NetworkACL", NULL,
};

int guid_parse(const char *text, uint8_t out[16]) {
  static const int dashes[] = {8, 13, 18, 23};
  if (strlen(text) != 36) return 0;
  int byte = 0;
  for (int i = 0; i < 36;) {
    if (i == dashes[0] || i == dashes[1] || i == dashes[2] || i == dashes[3]) {
      if (text[i] != '-') return 0;
      i++;
      continue;
    }
    unsigned v;
    if (sscanf(text + i, "%2x", &v) != 1 || !strchr("0123456789abcdefABCDEF", text[i]) ||
        !strchr("0123456789abcdefABCDEF", text[i + 1]) || text[i + 1] == 0) {
      return 0;
    }
    out[byte++] = (uint8_t)v;
    i += 2;
  }
  return 1;
}

static int valid_ip(const char *text) {
  unsigned char addr[16];
  return inet_pton(AF_INET, text, addr) == 1 || inet_pton(AF_INET6, text, addr) == 1;
}

static int valid_prefix(const char *text) {
  const char *slash = strchr(text, '/');
  if (!slash || slash - text > 45) return 0;
  char ip[46];
  memcpy(ip, text, (size_t)(slash - text));
  ip[slash - text] = 0;
  char *end;
  errno = 0;
  long bits = strtol(slash + 1, &end, 10);
  unsigned char addr[16];
  if (*end != 0 || slash[1] == 0 || errno != 0 || bits < 0) return 0;
  if (inet_pton(AF_INET, ip, addr) == 1) return bits <= 32;
  return inet_pton(AF_INET6, ip, addr) == 1 && bits <= 128;
}

/* Six hex bytes separated by '-' (HNS's own form) or ':' (Go's net.HardwareAddr, which kube-proxy
 * sends as the host's MAC), one separator throughout. */
static int valid_mac(const char *text) {
  if (strlen(text) != 17 || (text[2] != '-' && text[2] != ':')) return 0;
  for (int i = 0; i < 17; i++) {
    int hex = strchr("0123456789abcdefABCDEF", text[i]) != NULL && text[i] != 0;
    if (i % 3 == 2 ? text[i] != text[2] : !hex) return 0;
  }
  return 1;
}

static const char *kind_name(Kind kind) {
  switch (kind) {
  case K_STRING: return "a string";
  case K_GUID: return "a GUID string";
  case K_IP: return "an IP address string";
  case K_PREFIX: return "an IP prefix string";
  case K_MAC: return "a MAC address string";
  case K_UINT: return "an unsigned integer";
  case K_BOOL: return "a boolean";
  case K_OBJECT:
  case K_ANY_OBJECT: return "an object";
  case K_ANY: return "a JSON value";
  case K_ARRAY: return "an array";
  }
  return "?";
}

static SchemaResult refuse(SchemaResult result, char *error, size_t size, const char *where,
                           const char *problem) {
  snprintf(error, size, "%s: %s", where, problem);
  return result;
}

static SchemaResult check_value(const J *value, Kind kind, const Field *field, const char *where,
                                char *error, size_t size);

static SchemaResult check_object(const J *value, const Field *fields, const char *where,
                                 char *error, size_t size) {
  for (size_t i = 0; i < value->n; i++) {
    const Field *field = fields;
    while (field->name && strcmp(field->name, value->keys[i]) != 0) field++;
    char path[512];
    snprintf(path, sizeof path, "%s.%s", where, value->keys[i]);
    if (!field->name) return refuse(SCHEMA_INVALID_JSON, error, size, path, "unknown field");
    SchemaResult result = check_value(value->items[i], field->kind, field, path, error, size);
    if (result != SCHEMA_OK) return result;
  }
  if (fields == POLICY || fields == NETWORK_POLICY) {
    const J *type = json_get(value, "Type");
    if (!type) return refuse(SCHEMA_INVALID_JSON, error, size, where, "Type is required");
    int known = 0;
    for (const char **name = fields == POLICY ? POLICY_TYPES : NETWORK_POLICY_TYPES; *name; name++) {
      known |= strcmp(*name, type->text) == 0;
    }
    if (!known) return refuse(SCHEMA_INVALID_POLICY_TYPE, error, size, where, "unknown policy Type");
    const J *settings = json_get(value, "Settings");
    const Field *schema = strcmp(type->text, "ProviderAddress") == 0 ? PROVIDER_ADDRESS_SCHEMA
                          : fields == NETWORK_POLICY && strcmp(type->text, "RemoteSubnetRoute") == 0
                              ? REMOTE_SUBNET_ROUTE_SCHEMA
                              : NULL;
    if (settings && schema) {
      char path[512];
      snprintf(path, sizeof path, "%s.Settings", where);
      return check_object(settings, schema, path, error, size);
    }
  }
  return SCHEMA_OK;
}

static SchemaResult check_value(const J *value, Kind kind, const Field *field, const char *where,
                                char *error, size_t size) {
  char problem[160];
  snprintf(problem, sizeof problem, "expected %s", kind_name(kind));
  int is_string = value->type == J_STR;
  switch (kind) {
  case K_STRING:
    if (!is_string) return refuse(SCHEMA_INVALID_JSON, error, size, where, problem);
    return SCHEMA_OK;
  case K_GUID: {
    uint8_t guid[16];
    if (!is_string || !guid_parse(value->text, guid)) {
      return refuse(SCHEMA_INVALID_JSON, error, size, where, problem);
    }
    return SCHEMA_OK;
  }
  case K_IP:
  case K_PREFIX:
  case K_MAC:
    if (!is_string) return refuse(SCHEMA_INVALID_JSON, error, size, where, problem);
    if (kind == K_IP ? !valid_ip(value->text)
                     : kind == K_PREFIX ? !valid_prefix(value->text) : !valid_mac(value->text)) {
      return refuse(kind == K_MAC ? SCHEMA_INVALID_JSON : SCHEMA_INVALID_IP, error, size, where,
                    problem);
    }
    return SCHEMA_OK;
  case K_UINT: {
    if (value->type != J_NUM || strpbrk(value->text, ".eE-")) {
      return refuse(SCHEMA_INVALID_JSON, error, size, where, problem);
    }
    errno = 0;
    unsigned long long n = strtoull(value->text, NULL, 10);
    if (errno != 0 || n > field->max) {
      snprintf(problem, sizeof problem, "%s is out of range 0..%u", value->text, field->max);
      return refuse(SCHEMA_INVALID_JSON, error, size, where, problem);
    }
    if (field->bits && (n & ~(unsigned long long)field->bits)) {
      snprintf(problem, sizeof problem, "%s sets flags outside 0x%X", value->text, field->bits);
      return refuse(SCHEMA_INVALID_JSON, error, size, where, problem);
    }
    return SCHEMA_OK;
  }
  case K_BOOL:
    if (value->type != J_BOOL) return refuse(SCHEMA_INVALID_JSON, error, size, where, problem);
    return SCHEMA_OK;
  case K_ANY_OBJECT:
    if (value->type != J_OBJ) return refuse(SCHEMA_INVALID_JSON, error, size, where, problem);
    return SCHEMA_OK;
  case K_ANY:
    return SCHEMA_OK;
  case K_OBJECT:
    if (value->type != J_OBJ) return refuse(SCHEMA_INVALID_JSON, error, size, where, problem);
    return check_object(value, field->members, where, error, size);
  case K_ARRAY:
    if (value->type != J_ARR) return refuse(SCHEMA_INVALID_JSON, error, size, where, problem);
    for (size_t i = 0; i < value->n; i++) {
      char path[512];
      snprintf(path, sizeof path, "%s[%zu]", where, i);
      SchemaResult result = check_value(value->items[i], field->element, field, path, error, size);
      if (result != SCHEMA_OK) return result;
    }
    return SCHEMA_OK;
  }
  return SCHEMA_OK;
}

SchemaResult schema_check(const J *value, const Field *fields, const char *where, char *error,
                          size_t error_size) {
  if (value->type != J_OBJ) {
    return refuse(SCHEMA_INVALID_JSON, error, error_size, where, "expected an object");
  }
  return check_object(value, fields, where, error, error_size);
}
