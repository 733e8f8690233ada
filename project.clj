;; streamparse reads the Storm version from here; jvm/pom.xml and config.json pin the same
;; one (`elastorm check` verifies they agree). The jar is built by elastorm itself
;; (`elastorm jar`), so lein is never needed.
(defproject elastorm "0.1.0-SNAPSHOT"
  :resource-paths ["_resources"]
  :target-path "_build"
  :min-lein-version "2.0.0"
  :jvm-opts ["-client"]
  :dependencies  [[org.apache.storm/storm-core "2.8.3"]
                  [org.apache.storm/flux-core "2.8.3"]]
  :jar-exclusions     [#"log4j\.properties" #"org\.apache\.storm\.(?!flux)" #"trident" #"META-INF" #"meta-inf" #"\.yaml"]
  :uberjar-exclusions [#"log4j\.properties" #"org\.apache\.storm\.(?!flux)" #"trident" #"META-INF" #"meta-inf" #"\.yaml"]
  )
