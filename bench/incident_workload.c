// The staged incidents' actors (bench/incident_demo.sh).
//   incident_workload web SECONDS: process "webworker", 4 threads named "webworker" that each
//     run 0.2 ms and sleep 2 ms; thread 3 pinned to CPU 1, the others free.
//   incident_workload rt SECONDS: "rtjob", SCHED_FIFO 10 pinned to CPU 1, spinning.
//   incident_workload api SECONDS: process "api", 2 threads named "api" (CPU 0) that take a
//     lock a third, "flusher" (CPU 1), holds for 0.5 ms of CPU work every 3 ms.
//   incident_workload reindex SECONDS: "reindex" at nice -10 pinned to CPU 1, spinning.
//   incident_workload shop SECONDS: "shop", 2 ms of CPU work every 10 ms (its cgroup is
//     throttled by the script).
//   incident_workload logger SECONDS FILE: "logger" appends 4 KiB to FILE and fdatasyncs it
//     every 10 ms.
//   incident_workload backup SECONDS FILE: "backup" writes 32 MiB to FILE and fdatasyncs it,
//     over and over (the file kept under 2 GiB).
#define _GNU_SOURCE
#include <sys/prctl.h>
#include <sys/resource.h>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double seconds;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void spin(double s) {
  const double until = now() + s;
  while (now() < until) {
  }
}

// Spins until this thread has run `s` more on a CPU: work that a CPU hog stretches.
static void work(double s) {
  const double until = cpu_now() + s;
  while (cpu_now() < until) {
  }
}

static void nap(long ns) {
  const struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
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
  while (now() < end) {
    spin(0.0002);
    nap(2000000);
  }
  return NULL;
}

static void *flusher(void *arg) {
  (void)arg;
  prctl(PR_SET_NAME, "flusher");
  pin(1);
  const double end = now() + seconds;
  while (now() < end) {
    pthread_mutex_lock(&lock);
    work(0.0005);
    pthread_mutex_unlock(&lock);
    nap(2500000);
  }
  return NULL;
}

static void *api_worker(void *arg) {
  (void)arg;
  prctl(PR_SET_NAME, "api");
  pin(0);
  const double end = now() + seconds;
  while (now() < end) {
    pthread_mutex_lock(&lock);
    spin(0.00002);
    pthread_mutex_unlock(&lock);
    nap(500000);
  }
  return NULL;
}

static int run_threads(const char *name, void *(*fn)(void *), int n, void *(*extra)(void *)) {
  prctl(PR_SET_NAME, name);
  pthread_t t[5];
  for (long i = 0; i < n; i++) {
    pthread_create(&t[i], NULL, fn, (void *)i);
  }
  if (extra != NULL) {
    pthread_create(&t[n], NULL, extra, NULL);
  }
  for (int i = 0; i < n + (extra != NULL); i++) {
    pthread_join(t[i], NULL);
  }
  return 0;
}

static int write_loop(const char *file, size_t chunk, int chunks, long pause_ns, int sync_each) {
  const int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    perror(file);
    return 1;
  }
  char *buf = malloc(chunk);
  if (buf == NULL) {
    return 1;
  }
  memset(buf, 'x', chunk);
  const double end = now() + seconds;
  long long in_file = 0;
  while (now() < end) {
    for (int i = 0; i < chunks; i++) {
      if (write(fd, buf, chunk) != (ssize_t)chunk) {
        perror("write");
        return 1;
      }
      in_file += (long long)chunk;
    }
    if (sync_each && fdatasync(fd) != 0) {
      perror("fdatasync");
      return 1;
    }
    if (in_file >= (2LL << 30)) {
      if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0) {
        return 1;
      }
      in_file = 0;
    }
    if (pause_ns > 0) {
      nap(pause_ns);
    }
  }
  free(buf);
  close(fd);
  unlink(file);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: incident_workload web|rt|api|reindex|shop SECONDS\n"
                    "       incident_workload logger|backup SECONDS FILE\n");
    return 2;
  }
  const char *what = argv[1];
  seconds = atof(argv[2]);
  if (strcmp(what, "rt") == 0) {
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
  if (strcmp(what, "web") == 0) {
    return run_threads("webworker", worker, 4, NULL);
  }
  if (strcmp(what, "api") == 0) {
    return run_threads("api", api_worker, 2, flusher);
  }
  if (strcmp(what, "reindex") == 0) {
    prctl(PR_SET_NAME, "reindex");
    pin(1);
    if (setpriority(PRIO_PROCESS, 0, -10) != 0) {
      perror("setpriority");
      return 1;
    }
    spin(seconds);
    return 0;
  }
  if (strcmp(what, "shop") == 0) {
    prctl(PR_SET_NAME, "shop");
    const double end = now() + seconds;
    while (now() < end) {
      work(0.002);
      nap(8000000);
    }
    return 0;
  }
  if (argc == 4 && strcmp(what, "logger") == 0) {
    prctl(PR_SET_NAME, "logger");
    return write_loop(argv[3], 4096, 1, 10000000, 1);
  }
  if (argc == 4 && strcmp(what, "backup") == 0) {
    prctl(PR_SET_NAME, "backup");
    return write_loop(argv[3], 1 << 20, 32, 0, 1);
  }
  fprintf(stderr, "incident_workload: unknown actor %s\n", what);
  return 2;
}
