/* See json.h. */
#include "json.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct {
  const char *p;
  int depth;
  char *error;
  size_t error_size;
} Parser;

typedef struct {
  char *data;
  size_t n, cap;
} Buf;

static void *xrealloc(void *p, size_t size) {
  void *q = realloc(p, size ? size : 1);
  if (!q) abort();
  return q;
}

static char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *copy = xrealloc(NULL, n);
  memcpy(copy, s, n);
  return copy;
}

static void buf_add(Buf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    b->cap = (b->n + n + 1) * 2;
    b->data = xrealloc(b->data, b->cap);
  }
  memcpy(b->data + b->n, s, n);
  b->n += n;
  b->data[b->n] = 0;
}

static void buf_char(Buf *b, char c) { buf_add(b, &c, 1); }

static int fail(Parser *ps, const char *format, ...) {
  if (ps->error[0] == 0) {
    va_list args;
    va_start(args, format);
    vsnprintf(ps->error, ps->error_size, format, args);
    va_end(args);
  }
  return 0;
}

J *json_new(JType type, const char *text) {
  J *value = xrealloc(NULL, sizeof *value);
  memset(value, 0, sizeof *value);
  value->type = type;
  value->text = text ? xstrdup(text) : NULL;
  return value;
}

void json_free(J *value) {
  if (!value) return;
  for (size_t i = 0; i < value->n; i++) {
    json_free(value->items[i]);
    if (value->keys) free(value->keys[i]);
  }
  free(value->items);
  free(value->keys);
  free(value->text);
  free(value);
}

static void grow(J *c) {
  if (c->n < c->cap) return;
  c->cap = c->cap ? c->cap * 2 : 4;
  c->items = xrealloc(c->items, c->cap * sizeof *c->items);
  if (c->type == J_OBJ) c->keys = xrealloc(c->keys, c->cap * sizeof *c->keys);
}

void json_push(J *array, J *item) {
  grow(array);
  array->items[array->n++] = item;
}

J *json_get(const J *object, const char *key) {
  if (!object || object->type != J_OBJ) return NULL;
  for (size_t i = 0; i < object->n; i++) {
    if (strcmp(object->keys[i], key) == 0) return object->items[i];
  }
  return NULL;
}

void json_set(J *object, const char *key, J *item) {
  for (size_t i = 0; i < object->n; i++) {
    if (strcmp(object->keys[i], key) == 0) {
      json_free(object->items[i]);
      object->items[i] = item;
      return;
    }
  }
  grow(object);
  object->keys[object->n] = xstrdup(key);
  object->items[object->n++] = item;
}

J *json_take(J *c, size_t index) {
  J *item = c->items[index];
  if (c->keys) free(c->keys[index]);
  for (size_t i = index + 1; i < c->n; i++) {
    c->items[i - 1] = c->items[i];
    if (c->keys) c->keys[i - 1] = c->keys[i];
  }
  c->n--;
  return item;
}

static void skip_ws(Parser *ps) {
  while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r') ps->p++;
}

static int hex4(const char *s, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = s[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return 0;
  }
  *out = v;
  return 1;
}

static void put_utf8(Buf *b, unsigned cp) {
  char out[4];
  if (cp < 0x80) {
    buf_char(b, (char)cp);
  } else if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    buf_add(b, out, 2);
  } else if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    buf_add(b, out, 3);
  } else {
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    buf_add(b, out, 4);
  }
}

/* Parses a string literal at ps->p (which is '"'); returns the UTF-8 value or NULL. */
static char *parse_string(Parser *ps) {
  Buf b = {0};
  buf_add(&b, "", 0);
  ps->p++;
  for (;;) {
    unsigned char c = (unsigned char)*ps->p;
    if (c == 0) {
      fail(ps, "unterminated string");
      break;
    }
    if (c < 0x20) {
      fail(ps, "control character in a string");
      break;
    }
    if (c == '"') {
      ps->p++;
      return b.data;
    }
    if (c != '\\') {
      buf_char(&b, (char)c);
      ps->p++;
      continue;
    }
    char e = ps->p[1];
    ps->p += 2;
    const char *simple = strchr("\"\\/bfnrt", e);
    if (e != 0 && simple) {
      static const char decoded[] = "\"\\/\b\f\n\r\t";
      buf_char(&b, decoded[simple - "\"\\/bfnrt"]);
      continue;
    }
    unsigned cp;
    if (e != 'u' || !hex4(ps->p, &cp)) {
      fail(ps, "bad escape in a string");
      break;
    }
    ps->p += 4;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      unsigned low;
      if (ps->p[0] != '\\' || ps->p[1] != 'u' || !hex4(ps->p + 2, &low) || low < 0xDC00 ||
          low > 0xDFFF) {
        fail(ps, "lone surrogate in a string");
        break;
      }
      ps->p += 6;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      fail(ps, "lone surrogate in a string");
      break;
    }
    put_utf8(&b, cp);
  }
  free(b.data);
  return NULL;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static J *parse_value(Parser *ps);

static J *parse_number(Parser *ps) {
  const char *start = ps->p;
  if (*ps->p == '-') ps->p++;
  if (*ps->p == '0') {
    ps->p++;
  } else if (is_digit(*ps->p)) {
    while (is_digit(*ps->p)) ps->p++;
  } else {
    fail(ps, "bad number");
    return NULL;
  }
  if (*ps->p == '.') {
    ps->p++;
    if (!is_digit(*ps->p)) return fail(ps, "bad number"), NULL;
    while (is_digit(*ps->p)) ps->p++;
  }
  if (*ps->p == 'e' || *ps->p == 'E') {
    ps->p++;
    if (*ps->p == '+' || *ps->p == '-') ps->p++;
    if (!is_digit(*ps->p)) return fail(ps, "bad number"), NULL;
    while (is_digit(*ps->p)) ps->p++;
  }
  J *value = json_new(J_NUM, NULL);
  size_t n = (size_t)(ps->p - start);
  value->text = xrealloc(NULL, n + 1);
  memcpy(value->text, start, n);
  value->text[n] = 0;
  return value;
}

static J *parse_container(Parser *ps, JType type) {
  char close = type == J_OBJ ? '}' : ']';
  if (++ps->depth > MAX_DEPTH) return fail(ps, "nested too deeply"), NULL;
  J *c = json_new(type, NULL);
  ps->p++;
  skip_ws(ps);
  if (*ps->p == close) {
    ps->p++;
    ps->depth--;
    return c;
  }
  for (;;) {
    char *key = NULL;
    skip_ws(ps);
    if (type == J_OBJ) {
      if (*ps->p != '"') {
        fail(ps, "expected a member name");
        break;
      }
      key = parse_string(ps);
      if (!key) break;
      if (json_get(c, key)) {
        fail(ps, "duplicate member \"%s\"", key);
        free(key);
        break;
      }
      skip_ws(ps);
      if (*ps->p != ':') {
        fail(ps, "expected ':'");
        free(key);
        break;
      }
      ps->p++;
    }
    J *item = parse_value(ps);
    if (!item) {
      free(key);
      break;
    }
    if (key) {
      json_set(c, key, item);
      free(key);
    } else {
      json_push(c, item);
    }
    skip_ws(ps);
    if (*ps->p == ',') {
      ps->p++;
      continue;
    }
    if (*ps->p == close) {
      ps->p++;
      ps->depth--;
      return c;
    }
    fail(ps, "expected ',' or '%c'", close);
    break;
  }
  json_free(c);
  return NULL;
}

static J *parse_value(Parser *ps) {
  skip_ws(ps);
  switch (*ps->p) {
  case '{':
    return parse_container(ps, J_OBJ);
  case '[':
    return parse_container(ps, J_ARR);
  case '"': {
    char *s = parse_string(ps);
    if (!s) return NULL;
    J *value = json_new(J_STR, NULL);
    value->text = s;
    return value;
  }
  case 't':
  case 'f':
  case 'n': {
    static const char *words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
      size_t n = strlen(words[i]);
      if (strncmp(ps->p, words[i], n) == 0) {
        ps->p += n;
        return i == 2 ? json_new(J_NULL, NULL) : json_new(J_BOOL, words[i]);
      }
    }
    return fail(ps, "unexpected word"), NULL;
  }
  default:
    if (*ps->p == '-' || is_digit(*ps->p)) return parse_number(ps);
    return fail(ps, *ps->p ? "unexpected character '%c'" : "unexpected end", *ps->p), NULL;
  }
}

J *json_parse(const char *text, char *error, size_t error_size) {
  Parser ps = {text, 0, error, error_size};
  error[0] = 0;
  J *value = parse_value(&ps);
  if (!value) return NULL;
  skip_ws(&ps);
  if (*ps.p != 0) {
    fail(&ps, "text after the document");
    json_free(value);
    return NULL;
  }
  return value;
}

static void write_string(Buf *b, const char *s) {
  buf_char(b, '"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      buf_char(b, '\\');
      buf_char(b, (char)c);
    } else if (c < 0x20) {
      char esc[8];
      snprintf(esc, sizeof esc, "\\u%04x", c);
      buf_add(b, esc, 6);
    } else {
      buf_char(b, (char)c);
    }
  }
  buf_char(b, '"');
}

static void write_value(Buf *b, const J *value) {
  switch (value->type) {
  case J_NULL:
    buf_add(b, "null", 4);
    break;
  case J_BOOL:
  case J_NUM:
    buf_add(b, value->text, strlen(value->text));
    break;
  case J_STR:
    write_string(b, value->text);
    break;
  case J_ARR:
  case J_OBJ:
    buf_char(b, value->type == J_OBJ ? '{' : '[');
    for (size_t i = 0; i < value->n; i++) {
      if (i > 0) buf_char(b, ',');
      if (value->type == J_OBJ) {
        write_string(b, value->keys[i]);
        buf_char(b, ':');
      }
      write_value(b, value->items[i]);
    }
    buf_char(b, value->type == J_OBJ ? '}' : ']');
    break;
  }
}

char *json_write(const J *value) {
  Buf b = {0};
  buf_add(&b, "", 0);
  write_value(&b, value);
  return b.data;
}
