#pragma once

// The app's look beyond the system's: a dark palette for desktops that do
// not pass their dark mode on to Qt applications (GNOME without a Qt
// platform theme). Every widget of ours, charts included, takes its colours
// from the palette, so nothing else changes. GUI thread, before windows open.

class QApplication;

namespace crowdtrain::ui {

void useDarkPalette(QApplication& app);

} // namespace crowdtrain::ui
