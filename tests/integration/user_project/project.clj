(defproject wordcount "0.1.0-SNAPSHOT"
  :resource-paths ["_resources"]
  :target-path "_build"
  :dependencies [[org.apache.storm/storm-core "2.8.3"]])
