/*
 * A small JSON document model for the HCN stand-in: parse (strict RFC 8259,
 * depth-limited, duplicate keys refused), build, serialise, free.
 * Numbers keep their source text so nothing is lost in a round trip.
 */
#ifndef KPROXY_HCN_JSON_H
#define KPROXY_HCN_JSON_H

#include <stddef.h>

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } JType;

typedef struct J {
  JType type;
  /* J_STR: the UTF-8 value; J_NUM: the number's text; J_BOOL: "true" or "false". */
  char *text;
  /* J_ARR and J_OBJ: n items; J_OBJ also has keys. */
  size_t n, cap;
  struct J **items;
  char **keys;
} J;

/* Parses `text`; on failure returns NULL and writes a reason into `error`. */
J *json_parse(const char *text, char *error, size_t error_size);
/* Serialises compactly; the caller frees the result. */
char *json_write(const J *value);
void json_free(J *value);

J *json_new(JType type, const char *text);
/* Appends to an array; takes ownership of `item`. */
void json_push(J *array, J *item);
/* Sets a member (replacing one of the same key); takes ownership of `item`. */
void json_set(J *object, const char *key, J *item);
/* The member named `key`, or NULL. */
J *json_get(const J *object, const char *key);
/* Removes item `index` from an array or object without freeing it. */
J *json_take(J *container, size_t index);

#endif
