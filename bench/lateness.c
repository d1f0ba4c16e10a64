// An independent lateness probe (no rsched code): one nice-0 SCHED_OTHER thread pinned to each
// CPU wakes every PERIOD_US microseconds on an absolute CLOCK_MONOTONIC deadline and measures
// how late it woke. Lateness is what any ordinary thread of the machine suffers from whatever
// else runs (rschedd's recorder included), so it is the observer effect as others see it.
// Prints, over all CPUs: wakeups, p50/p99/p99.9 and max lateness in microseconds, and the max
// per CPU.
// Build: cc -O2 -pthread -o lateness bench/lateness.c     Run: ./lateness SECONDS [PERIOD_US]
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_LATE_US 1000000 /* a histogram of 1-us buckets up to 1 s; beyond that, the last one */

struct probe {
  int cpu;
  long long end_ns;
  long long period_ns;
  long long max_us;
  long long wakeups;
  unsigned *hist; /* MAX_LATE_US + 1 buckets */
};

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *run(void *arg) {
  struct probe *p = arg;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(p->cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
    fprintf(stderr, "lateness: cannot pin to CPU %d\n", p->cpu);
    exit(2);
  }
  long long next = now_ns() + p->period_ns;
  while (next < p->end_ns) {
    struct timespec ts = {.tv_sec = next / 1000000000LL, .tv_nsec = next % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
    long long late = (now_ns() - next) / 1000;
    if (late < 0)
      late = 0;
    if (late > p->max_us)
      p->max_us = late;
    p->hist[late > MAX_LATE_US ? MAX_LATE_US : late]++;
    p->wakeups++;
    next += p->period_ns;
    long long t = now_ns();
    if (next < t) /* missed deadlines are counted once, as one late wakeup */
      next = t + p->period_ns - (t - next) % p->period_ns;
  }
  return NULL;
}

static long long quantile(const unsigned *h, long long n, double q) {
  long long want = (long long)(q * (double)n), seen = 0;
  for (long long i = 0; i <= MAX_LATE_US; i++) {
    seen += h[i];
    if (seen > want)
      return i;
  }
  return MAX_LATE_US;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: lateness SECONDS [PERIOD_US]\n");
    return 2;
  }
  const double secs = atof(argv[1]);
  const long long period_us = argc > 2 ? atoll(argv[2]) : 1000;
  if (secs <= 0 || period_us <= 0) {
    fprintf(stderr, "lateness: SECONDS and PERIOD_US must be positive\n");
    return 2;
  }
  const int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
  struct probe *ps = calloc((size_t)ncpu, sizeof *ps);
  pthread_t *ts = calloc((size_t)ncpu, sizeof *ts);
  const long long end = now_ns() + (long long)(secs * 1e9);
  for (int c = 0; c < ncpu; c++) {
    ps[c].cpu = c;
    ps[c].end_ns = end;
    ps[c].period_ns = period_us * 1000;
    ps[c].hist = calloc(MAX_LATE_US + 1, sizeof(unsigned));
    if (!ps[c].hist || pthread_create(&ts[c], NULL, run, &ps[c]) != 0) {
      fprintf(stderr, "lateness: cannot start the probe of CPU %d\n", c);
      return 2;
    }
  }
  unsigned *all = calloc(MAX_LATE_US + 1, sizeof(unsigned));
  long long n = 0, max = 0;
  for (int c = 0; c < ncpu; c++) {
    pthread_join(ts[c], NULL);
    for (long long i = 0; i <= MAX_LATE_US; i++)
      all[i] += ps[c].hist[i];
    n += ps[c].wakeups;
    if (ps[c].max_us > max)
      max = ps[c].max_us;
  }
  printf("wakeups=%lld p50_us=%lld p99_us=%lld p999_us=%lld max_us=%lld per_cpu_max_us=", n,
         quantile(all, n, 0.5), quantile(all, n, 0.99), quantile(all, n, 0.999), max);
  for (int c = 0; c < ncpu; c++)
    printf("%s%lld", c ? "," : "", ps[c].max_us);
  printf("\n");
  return 0;
}
