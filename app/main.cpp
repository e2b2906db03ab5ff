// shardscope: the desktop app. With --render it draws one page headless and exits.
#include "main_window.h"
#include "render.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QRegularExpression>
#include <cstdio>
#include <cstring>
#include <vector>

int main(int argc, char* argv[]) {
    // Headless rendering, help and the version must not need a display: pick the offscreen
    // platform before Qt starts, unless the caller chose one.
    bool headless = false;
    for (int i = 1; i < argc; ++i)
        for (const char* flag : {"--render", "--help", "-h", "-?", "--help-all", "--version", "-v"})
            headless = headless || std::strcmp(argv[i], flag) == 0;
    if (headless && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    // The window needs one; without it Qt aborts with a message about plugins.
    if (!headless && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM") &&
        qEnvironmentVariableIsEmpty("DISPLAY") && qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY")) {
        std::fputs("shardscope: no display to open the window on (neither DISPLAY nor "
                   "WAYLAND_DISPLAY is set): start it in a desktop session, or draw a page "
                   "headless with --render PAGE -o OUT.png\n",
                   stderr);
        return 2;
    }
    // QApplication takes "-session ID" for X11 session management and removes it from argv, so
    // our --session is read from a copy and hidden from Qt.
    QStringList arguments;
    std::vector<char*> qtArgv;
    for (int i = 0; i < argc; ++i) {
        arguments << QString::fromLocal8Bit(argv[i]);
        const bool ours =
            std::strcmp(argv[i], "--session") == 0 || std::strcmp(argv[i], "-session") == 0;
        if (ours && i + 1 < argc) {
            arguments << QString::fromLocal8Bit(argv[++i]);
            continue;
        }
        if (std::strncmp(argv[i], "--session=", 10) == 0)
            continue;
        qtArgv.push_back(argv[i]);
    }
    int qtArgc = int(qtArgv.size());
    qtArgv.push_back(nullptr);
    QApplication app(qtArgc, qtArgv.data());
    QApplication::setApplicationName("Shardscope");
    QApplication::setOrganizationName("Shardscope");
    QApplication::setApplicationVersion(SHARDSCOPE_VERSION);
    QApplication::setDesktopFileName("shardscope");

    QCommandLineParser cli;
    cli.setApplicationDescription("A workbench for distributed training of large language models.");
    cli.addHelpOption();
    cli.addVersionOption();
    cli.addPositionalArgument("file", "A .shardscope session or a Hugging Face config.json.",
                              "[file]");
    const QCommandLineOption render("render",
                                    "Draw PAGE (memory, explorer, explorer/cluster, "
                                    "explorer/search, pipeline, pipeline/at-50, collectives, "
                                    "collectives/step-3, monitor, monitor/pipeline, "
                                    "monitor/ranks-at-50) with no display and exit.",
                                    "PAGE");
    const QCommandLineOption session("session", "The session to render (default: built in).",
                                     "FILE");
    const QCommandLineOption run(
        "run", "With --render monitor: the run directory to show (as it ended).", "DIR");
    const QCommandLineOption output({"o", "output"}, "Where --render writes its PNG.", "OUT.png");
    const QCommandLineOption size("size", "Window size for --render (default 1600x1000).", "WxH",
                                  "1600x1000");
    const QCommandLineOption theme("theme", "light, dark or system (--render default: light).",
                                   "THEME");
    cli.addOptions({render, session, run, output, size, theme});
    // parse(), not process(): process() ends with exit code 1 on an unknown option, and bad
    // input is exit code 2 throughout Shardscope.
    if (!cli.parse(arguments)) {
        std::fprintf(stderr, "shardscope: %s\nRun shardscope --help for the options.\n",
                     qPrintable(cli.errorText()));
        return 2;
    }
    if (cli.isSet("help"))
        cli.showHelp(0);
    if (cli.isSet("version"))
        cli.showVersion();

    if (cli.isSet(render)) {
        shardscope::RenderRequest r;
        r.page = cli.value(render);
        r.session = cli.value(session);
        r.output = cli.value(output);
        r.run = cli.value(run);
        if (cli.isSet(theme))
            r.theme = cli.value(theme);
        const auto m = QRegularExpression("^(\\d+)x(\\d+)$").match(cli.value(size));
        if (!m.hasMatch()) {
            std::fprintf(stderr, "shardscope: --size must look like 1600x1000, not \"%s\"\n",
                         qPrintable(cli.value(size)));
            return 2;
        }
        r.size = {m.captured(1).toInt(), m.captured(2).toInt()};
        const QString error = shardscope::renderPage(r);
        if (!error.isEmpty()) {
            std::fprintf(stderr, "shardscope: %s\n", qPrintable(error));
            return 2;
        }
        return 0;
    }

    shardscope::MainWindow window;
    window.show();
    if (!cli.positionalArguments().isEmpty())
        window.openFile(cli.positionalArguments().first());
    return app.exec();
}
