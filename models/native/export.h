/* The kernels' entry points, which raise_eval/native/__init__.py looks up by name: exported whatever the flags in CC
 * (-fvisibility=hidden, a common hardening flag, would otherwise hide them). */
#ifndef RAISE_EVAL_EXPORT
#if defined(__GNUC__) || defined(__clang__)
#define RAISE_EVAL_EXPORT __attribute__((visibility("default")))
#else
#define RAISE_EVAL_EXPORT
#endif
#endif
