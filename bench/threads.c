// N threads that each wake up every PERIOD seconds (absolute deadlines, phases spread over the
// period) and do a tiny bit of work: the same population as bench/threads.py, without Python's
// GIL, whose contention makes 10,000 Python threads saturate 2 CPUs on their own.
// Build: cc -O2 -pthread -o threads bench/threads.c      Run: ./threads N PERIOD DURATION
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long n;
static long long period_ns, end_ns;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int go;
static long long start_ns;

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *work(void *arg) {
  long i = (long)arg;
  pthread_mutex_lock(&mu);
  while (!go)
    pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  long long next = start_ns + period_ns * i / n;
  volatile unsigned sink = 0;
  while (next < end_ns) {
    struct timespec ts = {next / 1000000000LL, next % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
    for (unsigned k = 0; k < 200; ++k) // the tiny bit of work
      sink += k;
    next += period_ns;
  }
  return NULL;
}

int main(int argc, char **argv) {
  n = argc > 1 ? atol(argv[1]) : 1000;
  double period = argc > 2 ? atof(argv[2]) : 0.1;
  double duration = argc > 3 ? atof(argv[3]) : 30;
  if (n < 1 || period <= 0 || duration <= 0) {
    fprintf(stderr, "usage: threads N PERIOD_S DURATION_S\n");
    return 2;
  }
  period_ns = (long long)(period * 1e9);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  pthread_t *ts = calloc((size_t)n, sizeof *ts);
  for (long i = 0; i < n; ++i) {
    int e = pthread_create(&ts[i], &attr, work, (void *)i);
    if (e != 0) {
      fprintf(stderr, "threads: pthread_create %ld of %ld: %s\n", i + 1, n, strerror(e));
      return 1;
    }
  }
  pthread_mutex_lock(&mu);
  start_ns = now_ns();
  end_ns = start_ns + (long long)(duration * 1e9);
  go = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  fprintf(stderr, "threads: %ld threads running\n", n);
  for (long i = 0; i < n; ++i)
    pthread_join(ts[i], NULL);
  return 0;
}
