/* kiln plot: runs' metrics files as one picture, drawn with cairo (PNG from
 * an image surface, SVG from cairo's vector surface; the same drawing code).
 *
 *   legend: each run's colour and file name (wrapping to more rows)
 *   +---------------------------+---------------------------+
 *   | loss                      | test accuracy (%)         |
 *   +---------------------------+---------------------------+
 *   | throughput (images/s)     | data-wait (% of time)     |
 *   +---------------------------+---------------------------+
 *
 * Every panel shares the x axis (the global step, from 0), so runs of
 * different lengths line up. Colour is the run; within the loss panel the
 * line style is the series (a key in its title row, in grey). Inputs are all
 * read (and checked) before the output is opened: a bad metrics file leaves
 * an earlier picture in place. */
#include <cairo-svg.h>
#include <cairo.h>
#include <errno.h>
#include <fontconfig/fontconfig.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "train/internal/plot.h"

typedef struct {
    double r, g, b;
} rgb;
/* matplotlib's tab10 without its grey: the plot's frame and keys are grey, the runs never */
static const rgb palette[] = {{0.122, 0.467, 0.706}, {1.0, 0.498, 0.055}, {0.173, 0.627, 0.173},
                              {0.839, 0.153, 0.157}, {0.580, 0.404, 0.741}, {0.549, 0.337, 0.294},
                              {0.890, 0.467, 0.761}, {0.737, 0.741, 0.133}, {0.090, 0.745, 0.812}};
#define NPALETTE ((int)(sizeof palette / sizeof palette[0]))

enum { LINE, DOTS, DASHED, LINE_DOTS };

/* one curve of a panel: from the step or the epoch lines, a field, times a scale */
typedef struct {
    int epoch_rows;
    double (*get)(const kiln_metrics_row *r);
    double scale;
    int style;
    const char *key; /* the loss panel's key; NULL: none */
} series;

typedef struct {
    const char *title, *ylabel, *empty;
    int from_zero; /* the y axis includes 0 (rates and shares: their size matters) */
    int nseries;
    series s[3];
} panel_def;

static double get_loss(const kiln_metrics_row *r) { return r->loss; }
static double get_test_loss(const kiln_metrics_row *r) { return r->test_loss; }
static double get_accuracy(const kiln_metrics_row *r) { return r->test_accuracy; }
static double get_ips(const kiln_metrics_row *r) { return r->images_per_s; }
static double get_wait(const kiln_metrics_row *r) { return r->data_wait; }

static const panel_def panels[4] = {
    {"loss", "loss", "no loss", 0, 3,
     {{0, get_loss, 1, LINE, "steps"}, {1, get_loss, 1, DOTS, "epoch train"}, {1, get_test_loss, 1, DASHED, "test"}}},
    {"test accuracy", "accuracy (%)", "no test evaluations", 0, 1, {{1, get_accuracy, 100, LINE_DOTS, NULL}}},
    {"throughput", "images/s", "no step lines", 1, 1, {{0, get_ips, 1, LINE, NULL}}},
    {"data-wait: the time spent waiting for a batch", "% of time", "no step lines", 1, 1, {{0, get_wait, 100, LINE, NULL}}},
};

typedef struct {
    cairo_t *cr;
    double fs; /* font size: labels; titles are larger */
    const kiln_metrics_log *logs;
    const char *const *names;
    int n;
    kiln_axis ax; /* the shared step axis */
} plot;

/* the area a panel's curves are drawn in, and its y axis */
typedef struct {
    double x, y, w, h;
    kiln_axis ay;
    int has_data;
} frame;

/* a value worth a point: finite and not absurd (a diverged loss of 1e300 would flatten every other curve) */
static int plottable(double v) { return isfinite(v) && fabs(v) < 1e30; }

static const kiln_metrics_row *rows_of(const kiln_metrics_log *l, int epoch_rows, int64_t *n) {
    *n = epoch_rows ? l->nepochs : l->nsteps;
    return epoch_rows ? l->epochs : l->steps;
}

/* ---- text ---- */
static void text_at(plot *p, const char *s, double x, double y, double ax, double ay) {
    cairo_text_extents_t e;
    cairo_text_extents(p->cr, s, &e);
    cairo_move_to(p->cr, x - ax * e.x_advance, y + ay * p->fs * 0.7);
    cairo_show_text(p->cr, s);
}

static void grey(plot *p, double v) { cairo_set_source_rgb(p->cr, v, v, v); }

/* ---- axes ---- */
static double px(const plot *p, const frame *f, double step) { return f->x + (step - p->ax.lo) / (p->ax.hi - p->ax.lo) * f->w; }
static double py(const frame *f, double v) { return f->y + f->h - (v - f->ay.lo) / (f->ay.hi - f->ay.lo) * f->h; }

static void draw_axes(plot *p, const frame *f, const char *ylabel) {
    char buf[64];
    cairo_set_line_width(p->cr, 1);
    for (int i = 0; i < f->ay.nticks; i++) {
        double y = py(f, kiln_axis_tick(&f->ay, i));
        grey(p, 0.9), cairo_move_to(p->cr, f->x, y), cairo_line_to(p->cr, f->x + f->w, y), cairo_stroke(p->cr);
        kiln_axis_label(&f->ay, i, buf, sizeof buf);
        grey(p, 0.2), text_at(p, buf, f->x - 0.4 * p->fs, y, 1, 0.5);
    }
    for (int i = 0; i < p->ax.nticks; i++) {
        double x = px(p, f, kiln_axis_tick(&p->ax, i));
        grey(p, 0.9), cairo_move_to(p->cr, x, f->y), cairo_line_to(p->cr, x, f->y + f->h), cairo_stroke(p->cr);
        kiln_axis_label(&p->ax, i, buf, sizeof buf);
        grey(p, 0.2), text_at(p, buf, x, f->y + f->h + 0.5 * p->fs, 0.5, 1);
    }
    grey(p, 0.35), cairo_rectangle(p->cr, f->x, f->y, f->w, f->h), cairo_stroke(p->cr);
    grey(p, 0.2), text_at(p, "step", f->x + f->w / 2, f->y + f->h + 1.9 * p->fs, 0.5, 1);
    cairo_save(p->cr);
    cairo_translate(p->cr, f->x - 4.6 * p->fs, f->y + f->h / 2);
    cairo_rotate(p->cr, -M_PI / 2);
    cairo_move_to(p->cr, 0, 0);
    text_at(p, ylabel, 0, 0, 0.5, 0.5);
    cairo_restore(p->cr);
}

/* the y range of a panel over every run; 0 when nothing in it is plottable */
static int y_range(const plot *p, const panel_def *d, double *lo, double *hi) {
    *lo = INFINITY, *hi = -INFINITY;
    for (int r = 0; r < p->n; r++)
        for (int k = 0; k < d->nseries; k++) {
            int64_t n;
            const kiln_metrics_row *rows = rows_of(&p->logs[r], d->s[k].epoch_rows, &n);
            for (int64_t i = 0; i < n; i++) {
                double v = d->s[k].get(&rows[i]) * d->s[k].scale;
                if (plottable(v)) *lo = fmin(*lo, v), *hi = fmax(*hi, v);
            }
        }
    if (!(*hi >= *lo)) return 0;
    if (d->from_zero) *lo = fmin(*lo, 0), *hi = fmax(*hi, 0);
    return 1;
}

/* ---- curves ---- */
static void dot(plot *p, double x, double y, double r) {
    cairo_new_sub_path(p->cr);
    cairo_arc(p->cr, x, y, r, 0, 2 * M_PI);
    cairo_fill(p->cr);
}

static void set_style(plot *p, int style) {
    double dash[2] = {p->fs * 0.5, p->fs * 0.35};
    cairo_set_dash(p->cr, dash, style == DASHED ? 2 : 0, 0);
    cairo_set_line_width(p->cr, style == DASHED ? 1.5 : 1.8);
}

/* one run's series: a line through its points (broken where a value is missing) and/or dots on them */
static void draw_series(plot *p, const frame *f, const series *s, const kiln_metrics_log *l, rgb c) {
    int64_t n;
    const kiln_metrics_row *rows = rows_of(l, s->epoch_rows, &n);
    cairo_set_source_rgb(p->cr, c.r, c.g, c.b);
    if (s->style != DOTS) {
        set_style(p, s->style);
        int open = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = s->get(&rows[i]) * s->scale;
            if (!plottable(v)) {
                open = 0;
                continue;
            }
            (open ? cairo_line_to : cairo_move_to)(p->cr, px(p, f, (double)rows[i].step), py(f, v));
            open = 1;
        }
        cairo_stroke(p->cr);
        set_style(p, LINE);
    }
    if (s->style == LINE) return;
    for (int64_t i = 0; i < n; i++) {
        double v = s->get(&rows[i]) * s->scale;
        if (plottable(v)) dot(p, px(p, f, (double)rows[i].step), py(f, v), s->style == DOTS ? 0.3 * p->fs : 0.22 * p->fs);
    }
}

/* the loss panel's key, right-aligned in its title row, in grey */
static void draw_key(plot *p, const panel_def *d, double right, double y) {
    double x = right;
    for (int k = d->nseries - 1; k >= 0; k--) {
        cairo_text_extents_t e;
        cairo_text_extents(p->cr, d->s[k].key, &e);
        x -= e.x_advance;
        grey(p, 0.35), text_at(p, d->s[k].key, x, y, 0, 0.5);
        x -= 2.6 * p->fs;
        grey(p, 0.45);
        if (d->s[k].style == DOTS) dot(p, x + 1.1 * p->fs, y, 0.3 * p->fs);
        else {
            set_style(p, d->s[k].style);
            cairo_move_to(p->cr, x + 0.2 * p->fs, y), cairo_line_to(p->cr, x + 2.1 * p->fs, y), cairo_stroke(p->cr);
            set_style(p, LINE);
        }
        x -= 1.2 * p->fs;
    }
}

/* a panel in the cell (cx, cy, cw, ch): title row, axes, every run's curves clipped to the frame */
static void draw_panel(plot *p, const panel_def *d, double cx, double cy, double cw, double ch) {
    frame f = {.x = cx + 6 * p->fs, .y = cy + 2.2 * p->fs, .w = cw - 7 * p->fs, .h = ch - 5.4 * p->fs};
    double lo, hi;
    f.has_data = y_range(p, d, &lo, &hi);
    kiln_axis_nice(f.has_data ? lo : 0, f.has_data ? hi : 1, 6, &f.ay);
    cairo_set_font_size(p->cr, p->fs * 1.2);
    grey(p, 0.1), text_at(p, d->title, f.x, cy + 1 * p->fs, 0, 0.5);
    cairo_set_font_size(p->cr, p->fs);
    if (d->s[0].key) draw_key(p, d, f.x + f.w, cy + 1 * p->fs);
    draw_axes(p, &f, d->ylabel);
    if (!f.has_data) {
        grey(p, 0.5), text_at(p, d->empty, f.x + f.w / 2, f.y + f.h / 2, 0.5, 0.5);
        return;
    }
    cairo_save(p->cr);
    cairo_rectangle(p->cr, f.x - 0.4 * p->fs, f.y - 0.4 * p->fs, f.w + 0.8 * p->fs, f.h + 0.8 * p->fs);
    cairo_clip(p->cr);
    for (int r = 0; r < p->n; r++)
        for (int k = 0; k < d->nseries; k++) draw_series(p, &f, &d->s[k], &p->logs[r], palette[r % NPALETTE]);
    cairo_restore(p->cr);
}

/* ---- legend ---- */
/* a name cairo can show: its text API takes UTF-8 only (jansson's check); other bytes become '?' */
static void shown_name(const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s", name);
    json_t *ok = json_string(buf);
    for (char *c = buf; !ok && *c; c++)
        if ((unsigned char)*c >= 0x80) *c = '?';
    for (char *c = buf; *c; c++)
        if ((unsigned char)*c < 0x20) *c = '?';
    json_decref(ok);
}

/* the runs' names in rows across the top; returns the legend's height */
static double draw_legend(plot *p, double x0, double y0, double width, double max_h) {
    double x = x0, y = y0 + 0.8 * p->fs, row_h = 1.6 * p->fs;
    char name[256];
    for (int r = 0; r < p->n; r++) {
        cairo_text_extents_t e;
        shown_name(p->names[r], name, sizeof name);
        cairo_text_extents(p->cr, name, &e);
        double w = 3.2 * p->fs + e.x_advance;
        if (x > x0 && x + w > x0 + width) x = x0, y += row_h;
        if (y + row_h > y0 + max_h) { /* no room left: say how many are not named */
            snprintf(name, sizeof name, "... and %d more", p->n - r);
            grey(p, 0.3), text_at(p, name, x, y - row_h, 0, 0.5);
            break;
        }
        rgb c = palette[r % NPALETTE];
        cairo_set_source_rgb(p->cr, c.r, c.g, c.b);
        cairo_set_line_width(p->cr, 3);
        cairo_move_to(p->cr, x, y), cairo_line_to(p->cr, x + 2 * p->fs, y), cairo_stroke(p->cr);
        grey(p, 0.1), text_at(p, name, x + 2.5 * p->fs, y, 0, 0.5);
        x += w + 1.5 * p->fs;
    }
    return y + row_h - y0;
}

static void draw(plot *p, int width, int height) {
    cairo_t *cr = p->cr;
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, p->fs);
    double m = p->fs, top = m + draw_legend(p, m, m, width - 2 * m, height / 4.0);
    double cw = (width - m) / 2.0, ch = (height - top - m) / 2.0;
    for (int i = 0; i < 4; i++) draw_panel(p, &panels[i], m / 2 + (i % 2) * cw, top + (i / 2) * ch, cw, ch);
}

/* ---- output ---- */
static cairo_status_t to_file(void *closure, const unsigned char *data, unsigned int n) {
    return fwrite(data, 1, n, closure) == n ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

static double max_step(const kiln_metrics_log *logs, int n) {
    double hi = 1;
    for (int r = 0; r < n; r++) {
        for (int64_t i = 0; i < logs[r].nsteps; i++) hi = fmax(hi, (double)logs[r].steps[i].step);
        for (int64_t i = 0; i < logs[r].nepochs; i++) hi = fmax(hi, (double)logs[r].epochs[i].step);
    }
    return hi;
}

static kiln_status render(plot *p, kiln_plot_format fmt, FILE *f, int width, int height) {
    cairo_surface_t *s = fmt == KILN_PLOT_SVG ? cairo_svg_surface_create_for_stream(to_file, f, width, height)
                                              : cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
    p->cr = cairo_create(s);
    draw(p, width, height);
    cairo_status_t cs = cairo_status(p->cr);
    cairo_destroy(p->cr);
    if (cs == CAIRO_STATUS_SUCCESS && fmt == KILN_PLOT_PNG) cs = cairo_surface_write_to_png_stream(s, to_file, f);
    cairo_surface_finish(s); /* the SVG surface writes its document here */
    if (cs == CAIRO_STATUS_SUCCESS) cs = cairo_surface_status(s);
    cairo_surface_destroy(s);
    if (cs == CAIRO_STATUS_SUCCESS) return KILN_OK;
    return kiln_fail(cs == CAIRO_STATUS_WRITE_ERROR ? KILN_ERR_IO : KILN_ERR_BACKEND, "cairo: %s", cairo_status_to_string(cs));
}

kiln_status kiln_plot_logs(const kiln_metrics_log *logs, const char *const *names, int n, kiln_plot_format fmt,
                           const char *out, int width, int height) {
    if (n < 1 || n > KILN_PLOT_MAX_RUNS)
        return kiln_fail(KILN_ERR_INVALID_ARG, "kiln plot: %d runs (1 to %d)", n, KILN_PLOT_MAX_RUNS);
    if (width < KILN_PLOT_MIN_SIZE || width > KILN_PLOT_MAX_SIZE || height < KILN_PLOT_MIN_SIZE || height > KILN_PLOT_MAX_SIZE)
        return kiln_fail(KILN_ERR_INVALID_ARG, "kiln plot: a picture of %d x %d (each side %d to %d)", width, height,
                         KILN_PLOT_MIN_SIZE, KILN_PLOT_MAX_SIZE);
    plot p = {.fs = fmax(8, fmin(width, height) / 60.0), .logs = logs, .names = names, .n = n};
    kiln_axis_nice(0, max_step(logs, n), 8, &p.ax);
    int fd = kiln_open_write(out, 0);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        return kiln_fail_context(KILN_ERR_IO, "kiln plot --out");
    }
    kiln_status st = render(&p, fmt, f, width, height);
    if (fclose(f) != 0 && st == KILN_OK) st = kiln_fail(KILN_ERR_IO, "cannot write: %s", strerror(errno));
    if (st != KILN_OK) {
        kiln_fail_context(st, "kiln plot --out %s", out);
        unlink(out); /* no half picture left behind */
    }
    return st;
}

/* cairo's toy fonts keep fontconfig patterns in caches that live until these
 * two calls; kiln has no other cairo or fontconfig user that could still hold
 * an object of theirs when a picture is done */
void kiln_plot_release(void) {
    cairo_debug_reset_static_data();
    FcFini();
}

static int ends_with(const char *s, const char *ext) {
    size_t n = strlen(s), k = strlen(ext);
    return n > k && strcasecmp(s + n - k, ext) == 0;
}

kiln_status kiln_plot(const char *const *runs, int nruns, const char *out, int width, int height) {
    kiln_plot_format fmt = ends_with(out, ".svg") ? KILN_PLOT_SVG : KILN_PLOT_PNG;
    if (!ends_with(out, ".svg") && !ends_with(out, ".png"))
        return kiln_fail(KILN_ERR_INVALID_ARG, "--out %s: name a .png or .svg file (the extension picks the format)", out);
    if (nruns < 1 || nruns > KILN_PLOT_MAX_RUNS)
        return kiln_fail(KILN_ERR_INVALID_ARG, "kiln plot: %d metrics files (1 to %d)", nruns, KILN_PLOT_MAX_RUNS);
    kiln_metrics_log logs[KILN_PLOT_MAX_RUNS] = {{0}};
    kiln_status st = KILN_OK;
    for (int i = 0; st == KILN_OK && i < nruns; i++) st = kiln_metrics_read(runs[i], &logs[i]);
    if (st == KILN_OK) st = kiln_plot_logs(logs, runs, nruns, fmt, out, width, height);
    for (int i = 0; i < nruns; i++) kiln_metrics_log_free(&logs[i]);
    kiln_plot_release();
    return st;
}
