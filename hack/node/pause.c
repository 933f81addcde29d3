/* The sandbox ("pause") process of the bed's node: holds the pod's namespaces and does
 * nothing else. As PID 1 of the pod it reaps the zombies it inherits (SIGCHLD) and exits 0
 * on SIGINT or SIGTERM, which is what the container runtime sends to stop a sandbox.
 * Built statically by hack/build-pause.sh into the image the node's containerd is told to use
 * (sandbox_image). Written for this project; the behaviour is that of Kubernetes' pause. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  struct sigaction stop, child;
  if (argc == 2 && strcmp(argv[1], "-v") == 0) {
    puts("pnc-pause 1");
    return 0;
  }
  if (getpid() != 1) {
    fprintf(stderr, "pause: warning: not PID 1, zombies of the pod are not reaped here\n");
  }
  memset(&stop, 0, sizeof stop);
  stop.sa_handler = on_stop;
  memset(&child, 0, sizeof child);
  child.sa_handler = on_child;
  child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0) {
    perror("pause: sigaction");
    return 1;
  }
  for (;;) {
    pause();
  }
}
