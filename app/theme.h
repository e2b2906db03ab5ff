// Light, dark or the system's palette. Widgets take every colour from the palette, so switching
// re-colours charts too (they restyle on QEvent::PaletteChange).
#pragma once

#include <QString>

namespace shardscope {

enum class Theme { System, Light, Dark };
QString toString(Theme t);               // "system", "light", "dark"
Theme themeFromString(const QString& s); // unknown -> System
void applyTheme(Theme t);                // on the running QApplication

} // namespace shardscope
