#pragma once

// The settings page: a form built from the daemon's described settings
// (ui/settings_editors.h), in sections; each edit is sent at once, and a
// refusal shows the daemon's words and the value kept. A reload with the
// same settings updates the editors in place. Below them the app's own
// setting (start at login) and the data folder. GUI thread only.

#include "ui/page.h"

#include <map>
#include <string>
#include <vector>

class QFormLayout;
class QLabel;

namespace crowdtrain::ui {

class SettingsPage : public Page {
    Q_OBJECT

public:
    explicit SettingsPage(Link& link, QWidget* parent = nullptr);
    // Sends one setting; on refusal shows the daemon's message and reverts.
    void apply(const QString& key, const control::Value& value);
    QLabel* errorLabel() const { return m_error; }
    QWidget* editorFor(const QString& key) const;

signals:
    // The daemon's answer to apply().
    void applied(const QString& key, bool ok);

protected:
    void load() override;

private:
    void showSettings(const control::Value& described);
    bool sameForm(const control::Value& described) const;
    void build(const control::Value& described);
    void addSection(const std::string& key);
    void addSetting(const control::Value& spec);
    QString descriptionOf(const control::Value& spec) const;
    void addAppRows();

    QFormLayout* m_form = nullptr;
    QWidget* m_formHost = nullptr;
    QLabel* m_error;
    std::map<QString, QWidget*> m_editors;
    std::vector<std::string> m_keys; // the form's settings, in order
    QString m_gpuUnavailable; // why the GPU limits do nothing here ("" with NVML)
    QString m_coreAdvice; // a GPU without its CUDA core: what to install ("" otherwise)
    QString m_builtCoreAdvice;
    QString m_builtGpuUnavailable; // the same, as the form shows it
};

} // namespace crowdtrain::ui
