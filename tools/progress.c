/* Progress on the terminal: one bar, redrawn in place, that fits the
 * terminal's width and shows step, epoch, a smoothed loss, the learning rate,
 * throughput, data-wait and ETA. Messages from the library (epoch lines,
 * warnings) are printed above it: the bar's line is erased first and redrawn
 * after, so the scrollback keeps one line per epoch and no message lands on
 * the bar. Off a terminal: one plain line every --log-every steps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include "cli.h"

void progress_init(progress_ui *ui, int quiet, int64_t log_every) {
    memset(ui, 0, sizeof *ui);
    ui->tty = isatty(2);
    ui->quiet = quiet;
    ui->log_every = log_every > 0 ? log_every : 100;
}

static int columns(void) {
    struct winsize ws;
    if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    const char *c = getenv("COLUMNS");
    int n = c ? atoi(c) : 0;
    return n > 20 ? n : 80;
}

static void fmt_time(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 1e7) snprintf(buf, n, "--:--");
    else if (s >= 3600) snprintf(buf, n, "%d:%02d:%02d", (int)s / 3600, (int)s / 60 % 60, (int)s % 60);
    else snprintf(buf, n, "%d:%02d", (int)s / 60, (int)s % 60);
}

/* "[#####.....] " then the figures; a narrow terminal drops the least useful
 * figures first (elapsed, data-wait, throughput), and the line never wraps */
static void draw_bar(progress_ui *ui, const kiln_progress *p) {
    char eta[16], el[16], stats[256] = "";
    fmt_time(p->eta_s, eta, sizeof eta);
    fmt_time(p->elapsed_s, el, sizeof el);
    int cols = columns() - 1, n = 0;
    for (int level = 0; level < 4; level++) {
        n = snprintf(stats, sizeof stats, " %lld/%lld ep %lld/%lld loss %.4f lr %.3g", (long long)p->step,
                     (long long)p->total_steps, (long long)p->epoch + 1, (long long)p->epochs, p->loss_smooth, p->lr);
        if (level < 3) n += snprintf(stats + n, sizeof stats - (size_t)n, " %.0f img/s", p->images_per_s);
        if (level < 2) n += snprintf(stats + n, sizeof stats - (size_t)n, " data-wait %.1f%%", 100 * p->data_wait_frac);
        if (level < 1) n += snprintf(stats + n, sizeof stats - (size_t)n, " %s", el);
        n += snprintf(stats + n, sizeof stats - (size_t)n, " ETA %s", eta);
        if (n + 12 <= cols) break;
    }
    int width = cols - n - 2;
    if (width > 40) width = 40;
    if (width < 1) width = 1;
    if (width + 2 + n > cols) n = cols - width - 2 > 0 ? cols - width - 2 : 0;
    int filled = (int)(width * (double)p->step / (double)(p->total_steps ? p->total_steps : 1));
    char *b = ui->bar;
    int o = snprintf(b, sizeof ui->bar, "[");
    for (int i = 0; i < width && o < (int)sizeof ui->bar - 2; i++) b[o++] = i < filled ? '#' : '.';
    snprintf(b + o, sizeof ui->bar - (size_t)o, "]%.*s", n, stats);
    fprintf(stderr, "\r%s\033[K", b);
    fflush(stderr);
    ui->bar_shown = 1;
}

void progress_clear(progress_ui *ui) {
    if (!ui->bar_shown) return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    ui->bar_shown = 0;
}

void progress_on_step(const kiln_progress *p, void *user) {
    progress_ui *ui = user;
    if (ui->quiet) return;
    if (ui->tty) {
        if (p->done) progress_clear(ui);
        else draw_bar(ui, p);
        return;
    }
    if (p->step % ui->log_every != 0 && !p->done) return;
    char eta[16];
    fmt_time(p->eta_s, eta, sizeof eta);
    fprintf(stderr, "kiln: step %lld/%lld epoch %lld/%lld loss %.4f lr %.3g %.0f img/s data-wait %.1f%% ETA %s\n",
            (long long)p->step, (long long)p->total_steps, (long long)p->epoch + 1, (long long)p->epochs, p->loss, p->lr,
            p->images_per_s, 100 * p->data_wait_frac, eta);
}

void progress_log_sink(kiln_log_level level, const char *msg, void *user) {
    progress_ui *ui = user;
    static const char *names[] = {"debug", "info", "warning", "error"};
    int redraw = ui->bar_shown;
    progress_clear(ui);
    if (level == KILN_LOG_INFO) fprintf(stderr, "kiln: %s\n", msg);
    else fprintf(stderr, "kiln: %s: %s\n", names[level], msg);
    if (redraw) {
        fprintf(stderr, "\r%s\033[K", ui->bar);
        ui->bar_shown = 1;
    }
    fflush(stderr);
}
