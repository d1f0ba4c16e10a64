// The staged incident's actors (bench/incident_demo.sh).
//   incident_workload web SECONDS: process "webworker", 4 threads named "webworker" that each
//     run 0.2 ms and sleep 2 ms; thread 3 pinned to CPU 1, the others free.
//   incident_workload rt SECONDS: "rtjob", SCHED_FIFO 10 pinned to CPU 1, spinning.
#define _GNU_SOURCE
#include <sys/prctl.h>

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void spin(double s) {
  const double until = now() + s;
  while (now() < until) {
  }
}

static void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    perror("sched_setaffinity");
    exit(1);
  }
}

static void *worker(void *arg) {
  const long i = (long)arg;
  prctl(PR_SET_NAME, "webworker");
  if (i == 3) {
    pin(1);
  }
  const double end = now() + seconds;
  const struct timespec nap = {0, 2000000};
  while (now() < end) {
    spin(0.0002);
    nanosleep(&nap, NULL);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[1], "web") != 0 && strcmp(argv[1], "rt") != 0)) {
    fprintf(stderr, "usage: incident_workload web|rt SECONDS\n");
    return 2;
  }
  seconds = atof(argv[2]);
  if (strcmp(argv[1], "rt") == 0) {
    prctl(PR_SET_NAME, "rtjob");
    pin(1);
    struct sched_param sp = {.sched_priority = 10};
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
      perror("sched_setscheduler");
      return 1;
    }
    spin(seconds);
    return 0;
  }
  prctl(PR_SET_NAME, "webworker");
  pthread_t t[4];
  for (long i = 0; i < 4; i++) {
    pthread_create(&t[i], NULL, worker, (void *)i);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
  }
  return 0;
}
