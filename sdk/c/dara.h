/*
 * dara.h — properties for dara, header-only: include it, no library to link.
 *
 *   DARA_ALWAYS(cond, "name")       cond holds at every evaluation        (broken: a bug)
 *   DARA_SOMETIMES(cond, "name")    cond holds at some evaluation of some execution (a goal)
 *   DARA_REACHABLE("name")          this point is reached in some execution         (a goal)
 *   DARA_UNREACHABLE("name")        this point is never reached           (reached: a bug)
 *   DARA_EVENTUALLY(cond, "name")   cond holds at some evaluation of each execution, by its
 *                                   end                                   (never: a bug)
 *
 * `name` is a string literal: a bug's identity is its property's name. `cond` is evaluated
 * whether or not the program runs under dara (like assert without NDEBUG), so keep side effects
 * out of it. Outside dara a macro costs the condition and one branch; under dara it writes one
 * line to the descriptor DARA_SDK_FD names (the protocol, for any other language or a shell
 * script, is in docs/properties.md). Every property in the program is also declared to dara once
 * at start-up (from a table the linker collects in the section `dara_properties`), so a goal
 * that is never reached is still listed as such.
 *
 * Works with gcc and clang, C and C++, in dynamically linked, static and sanitizer builds.
 */
#ifndef DARA_H
#define DARA_H

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

struct dara__site {
    const char *kind;
    const char *name;
};

/* -2: not looked up yet; -1: not under dara. Per translation unit; racing first reads agree. */
static int dara__sdk_fd = -2;

static inline int dara__fd(void)
{
    int fd = __atomic_load_n(&dara__sdk_fd, __ATOMIC_RELAXED);
    if (__builtin_expect(fd == -2, 0)) {
        const char *v = getenv("DARA_SDK_FD");
        fd = (v && *v) ? atoi(v) : -1;
        __atomic_store_n(&dara__sdk_fd, fd, __ATOMIC_RELAXED);
    }
    return fd;
}

/* Writes "KIND [HELD ]NAME\n" in one write (atomic for a pipe: shorter than PIPE_BUF). */
static inline void dara__emit(const char *prefix, const char *kind, int held, const char *name)
{
    char line[1024];
    size_t n = 0, room = sizeof line - 1;
    const char *parts[3] = { prefix, kind, held < 0 ? "" : (held ? "1 " : "0 ") };
    for (int i = 0; i < 3; i++) {
        size_t len = strlen(parts[i]);
        memcpy(line + n, parts[i], len);
        n += len;
        if (i == 1) line[n++] = ' ';
    }
    size_t len = strlen(name);
    if (len > room - n) len = room - n;
    memcpy(line + n, name, len);
    n += len;
    line[n++] = '\n';
    ssize_t w = write(dara__fd(), line, n);
    (void)w;
}

#define DARA__SITE(kind, name)                                                            \
    static const struct dara__site dara__site                                             \
        __attribute__((section("dara_properties"), used, aligned(sizeof(void *)))) =      \
            { kind, name }

#define DARA__AT(kind, held, name)                                                        \
    do {                                                                                  \
        DARA__SITE(kind, name);                                                           \
        (void)dara__site;                                                                 \
        if (__builtin_expect(dara__fd() >= 0, 0)) dara__emit("", kind, (held), name);     \
    } while (0)

#define DARA_ALWAYS(cond, name) DARA__AT("always", !!(cond), name)
#define DARA_SOMETIMES(cond, name) DARA__AT("sometimes", !!(cond), name)
#define DARA_EVENTUALLY(cond, name) DARA__AT("eventually", !!(cond), name)
#define DARA_REACHABLE(name) DARA__AT("reachable", -1, name)
#define DARA_UNREACHABLE(name) DARA__AT("unreachable", -1, name)

/* The linker's bounds of the section (weak: a program without properties has none). */
extern const struct dara__site __start_dara_properties[] __attribute__((weak, visibility("hidden")));
extern const struct dara__site __stop_dara_properties[] __attribute__((weak, visibility("hidden")));

/* Declares every property of this module to dara (each translation unit that includes this
 * header does so; dara counts a declaration once). */
__attribute__((constructor, unused)) static void dara__declare_all(void)
{
    if (dara__fd() < 0 || !__start_dara_properties) return;
    for (const struct dara__site *s = __start_dara_properties; s < __stop_dara_properties; s++)
        dara__emit("declare ", s->kind, -1, s->name);
}

#ifdef __cplusplus
}
#endif

#endif /* DARA_H */
